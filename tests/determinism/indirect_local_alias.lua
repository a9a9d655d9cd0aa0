-- expect: assignment to 'c', which holds captured variable 'counts'
-- A local alias of a captured table, written inside a branch (issue 24 item 3).
local counts = {}
return parallel({
  function() local c = counts; c.a = 1; return agent('a') end,
  function() local c = counts; c.b = 2; return agent('b') end,
})
