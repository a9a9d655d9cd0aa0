"""A test MCP server on the official Python SDK (PyPI `mcp`), for cairn's MCP client tests.

Run: `python3 server.py stdio` or `python3 server.py http PORT`. Its behaviour is steered by
environment variables, so one script plays every server the tests need:

- `CAIRN_MCP_LOG`: a file that gets one line per tool call (`name json-args`), so a test can
  count what the server really ran (a replay must add nothing).
- `CAIRN_MCP_VARIANT`: `v2` changes the description of `search` (the tool list changes).
- `CAIRN_MCP_DIE_ON`: the name of a tool whose call exits the process without answering.
"""

import json
import logging
import os
import sys
import time

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.utilities.types import Image

server = MCPServer("cairn-test")

VARIANT = os.environ.get("CAIRN_MCP_VARIANT", "v1")


def record(name, args):
    path = os.environ.get("CAIRN_MCP_LOG")
    if path:
        with open(path, "a", encoding="utf-8") as log:
            log.write(f"{name} {json.dumps(args, sort_keys=True)}\n")
    if os.environ.get("CAIRN_MCP_DIE_ON") == name:
        os._exit(3)


SEARCH_DESCRIPTION = (
    "Searches the test corpus for a word (v2: now with ranking)."
    if VARIANT == "v2"
    else "Searches the test corpus for a word."
)


@server.tool(description=SEARCH_DESCRIPTION)
def search(query: str) -> str:
    record("search", {"query": query})
    return f"3 documents mention {query!r}: a.md, b.md, c.md"


@server.tool(description="Adds two integers.")
def add(a: int, b: int) -> str:
    record("add", {"a": a, "b": b})
    return str(a + b)


@server.tool(description="Sleeps for the given number of seconds, then answers.")
def slow(seconds: float) -> str:
    record("slow", {"seconds": seconds})
    time.sleep(seconds)
    return "woke up"


@server.tool(description="Answers with the given number of bytes of text.")
def flood(size: int) -> str:
    record("flood", {"size": size})
    return "x" * size


@server.tool(description="Answers with a small PNG image.")
def picture() -> Image:
    record("picture", {})
    png = bytes.fromhex(
        "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
        "1f15c4890000000d49444154789c6360f8cf000001010100a5f6b5b40000000049454e44ae426082"
    )
    return Image(data=png, format="png")


@server.tool(description="Says whether the request carried the X-Cairn-Test header (HTTP only).")
def header(ctx: Context) -> str:
    record("header", {})
    headers = ctx.headers or {}
    value = headers.get("x-cairn-test")
    return "no header" if value is None else f"header of {len(value)} characters"


@server.tool(description="Always fails.")
def broken() -> str:
    record("broken", {})
    raise ValueError("the tool broke on purpose")


@server.tool(description="Exits the server process without answering.")
def crash() -> str:
    record("crash", {})
    os._exit(3)


if __name__ == "__main__":
    # The SDK logs a failing tool's traceback with rich formatting before it answers, which
    # takes seconds of CPU on a loaded machine and pushes a quick error past the tests' call
    # timeouts; the tests read the answers, not the log.
    logging.disable(logging.CRITICAL)
    mode = sys.argv[1] if len(sys.argv) > 1 else "stdio"
    if mode == "stdio":
        server.run("stdio")
    else:
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
