local fs = {}
local n = 0
repeat
  n = n + 1
  local f = function() return n * 2 end
  fs[n] = f
until n == 3
return fs
