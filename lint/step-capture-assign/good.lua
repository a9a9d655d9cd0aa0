local acc = step("collect", function()
  local mine = {}
  mine[1] = 1
  return mine
end)
acc[2] = 2
return agent("seen " .. #acc)
