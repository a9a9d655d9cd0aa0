local seen = {}
parallel({
  function() return step("inner", function() seen.first = true return 1 end) end,
  function() return 2 end,
})
return seen
