-- expect: assignment to 't', which holds captured variable 'tasks'
-- The value variable of a loop over a captured table, written inside a branch (issue 24 item 3).
local tasks = {{name = 'x'}, {name = 'y'}}
return parallel({
  function() for _, t in ipairs(tasks) do t.done = true end return agent('a') end,
  function() return agent('b') end,
})
