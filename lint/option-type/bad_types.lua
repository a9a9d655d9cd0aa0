local a = agent("write", {max_turns = "three", tools = "web"})
local b = parallel(args.items, function(x) return x end, {concurrency = 2.5})
return {a, b}
