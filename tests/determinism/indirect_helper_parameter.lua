-- expect: calling 'add', which writes its parameter 't', on captured variable 'acc'
-- A helper that writes the table passed to it, given a captured table inside a branch
-- (issue 24 item 3).
local acc = {}
local function add(t, v) table.insert(t, v) end
return parallel({
  function() add(acc, 1) return agent('a') end,
  function() add(acc, 2) return agent('b') end,
})
