local prompts = {"a", "b"}
local first = agent(table.unpack(prompts))
local r = step("fetch", function() return host_call("fetch_page", {url = args.url}) end, {key = "fetch"})
local p = phase("draft", function() return agent("draft") end)
log("info", "done")
log("warn", "done", {r = r})
return {first, r, p, now(), random(), random("k"), uuid(), await_external("approve")}
