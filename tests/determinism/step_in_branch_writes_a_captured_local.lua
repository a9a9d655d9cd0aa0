-- Issue 24 item 3, found by tests/it/determinism_runtime.rs: a step body inside a branch calls a
-- function kept in a captured table, which writes a captured local. The function was the
-- branch's private copy, so the write landed in the branch's cell: the step's own check did not
-- see it, the step's value was journaled, and the branch found the write at its next call. A
-- replay serves the step without running its body, so the write never happened there and the
-- branch's next call ran live. Now each step body views what it captured through its own views:
-- the write is the step's, found before its value is journaled.
local n = 0
local ops = {}
ops.bump = function() n = n + 1 end
return parallel({0, 1, 2, 3, 4, 5, 6, 7}, function(i)
  local a = agent('first ' .. i)
  local s = step('s' .. i, function() if i == 0 then ops.bump() end return 1 end)
  return a .. s .. agent('second ' .. i)
end)
