local state = {counts = {0, 0}}
parallel({
  function() state.counts[1] = 1 end,
  function() state["counts"][2] = 5 end,
})
return state
