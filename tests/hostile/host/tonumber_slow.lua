-- Each call a tonumber of 4 MB of digits: it walks the string, allocating nothing.
local s = string.rep("1234567890", 400000)
local n = 0
while true do if tonumber(s) then n = n + 1 end end
