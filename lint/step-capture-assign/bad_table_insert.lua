local acc = {}
local n = step("collect", function()
  table.insert(acc, 1)
  return #acc
end)
return agent("seen " .. #acc)
