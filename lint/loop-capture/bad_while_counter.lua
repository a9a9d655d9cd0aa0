local fs = {}
local i = 1
while i <= 3 do
  fs[#fs + 1] = function() return i end
  i = i + 1
end
return parallel(fs)
