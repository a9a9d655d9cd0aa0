return host_call("fetch_pgae", {url = args.url})
