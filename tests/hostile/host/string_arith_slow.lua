-- Each operation arithmetic on a 4 MB numeric string: the conversion walks it.
local s = string.rep("1234567890", 400000)
local n = 0
while true do if s + 0 > 0 then n = n + 1 end end
