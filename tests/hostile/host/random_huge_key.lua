-- A 4 MB key hashed by the host on every call, outside script time.
local k = string.rep("0123456789abcdef", 250000)
while true do random(k) end
