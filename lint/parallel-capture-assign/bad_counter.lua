local total = 0
parallel({
  function() total = total + 1 end,
  function() total = total + 2 end,
})
return total
