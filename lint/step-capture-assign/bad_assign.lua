local acc = {}
local total = 0
local n = step("collect", function()
  acc.first = true
  total = total + 1
  return 1
end)
return agent("seen " .. total)
