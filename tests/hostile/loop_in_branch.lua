-- A branch that never ends while its sibling waits on a model: the run's budget stops both.
return parallel({
  function() while true do end end,
  function() return agent("wait for me") end,
})
