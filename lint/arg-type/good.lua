local out = parallel({
  function() return agent("a") end,
  function() return agent("b") end,
}, {concurrency = 2})
local stages = pipeline(args.items, {
  function(x) return x .. "!" end,
  function(x) return agent("polish " .. x) end,
})
log("debug", "lengths", {n = #out + 1})
return {out = out, stages = stages}
