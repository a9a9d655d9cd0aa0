local function format(x) return "item " .. x end
local out = parallel(args.items, function(item) return agent(format(item), {key = format(item)}) end)
return step("collect", function() return out end, {deps = {#out}})
