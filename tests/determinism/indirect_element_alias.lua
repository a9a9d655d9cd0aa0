-- expect: assignment to 't', which holds captured variable 'tasks'
-- An element of a captured table, held in a local and written inside a branch (issue 24 item 3).
local tasks = {{name = 'x'}, {name = 'y'}}
return parallel({
  function() local t = tasks[1]; t.x = agent('a'); return t.x end,
  function() return agent('b') end,
})
