-- A fan-out that runs out of budget: twenty branches each reserve $0.05 against the run's
-- ceiling, so with --budget 0.25 the first five are admitted, the rest are refused and the
-- run ends `exhausted` with partial results and itemized drops.
-- Run: cairn run scripts/exhausted_fanout.lua --budget 0.25
-- The Lua twin of exhausted_fanout.rhai: the same calls, the same journal.
local items = {}
for i = 0, 19 do items[#items + 1] = i end
return parallel(items, function(i)
  return agent("Analyze shard " .. i .. ".", { est_cost = 0.05, label = "shard " .. i })
end, { on_error = "null" })
