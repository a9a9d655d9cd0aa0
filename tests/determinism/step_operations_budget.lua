-- A step body and the code after it each spend `spin`% of the operation budget (default 60,
-- over it together). A replay serves the step without running its body; it must charge the
-- operations the body ran live, or the replay stays under the budget and pays the agent call.
local spin = args.spin or 60
local rounds = spin * 10000 // 2
local a = step('spin', function()
  local s = 0
  for _ = 1, rounds do s = s + 1 end
  return s
end)
local b = 0
for _ = 1, rounds do b = b + 1 end
return agent('spun ' .. a .. ' and ' .. b)
