return host_call("fetch_page", {url = args.url})
