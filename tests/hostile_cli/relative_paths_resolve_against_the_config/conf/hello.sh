#!/bin/sh
echo '"hello from conf"'
