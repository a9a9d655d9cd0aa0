-- Steps nested without end.
local function deeper(n)
  return step("level " .. n, function() return deeper(n + 1) end)
end
return deeper(0)
