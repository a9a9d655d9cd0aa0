-- Lua 5.4 binds a for loop's variables afresh on every iteration, so these closures each
-- see their own value: not the Rhai hazard, and not reported.
local branches = {}
for i = 1, 3 do
  branches[#branches + 1] = function() return agent("part " .. i) end
end
for _, topic in ipairs(args.topics) do
  table.insert(branches, function() return agent("research " .. topic) end)
end
-- A copy made inside the loop is fresh too.
local n = 0
while n < 3 do
  n = n + 1
  local copy = n
  branches[#branches + 1] = function() return copy end
end
-- A body run at once by a global cannot outlive the loop.
local k = 0
while k < 2 do
  k = k + 1
  step("s" .. k, function() return k end)
end
return parallel(branches)
