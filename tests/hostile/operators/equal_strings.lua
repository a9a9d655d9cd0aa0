-- Each instruction compares two distinct 4 MB strings that are equal: the VM walks both.
local a = string.rep("0123456789", 400000)
local b = string.rep("0123456789", 400000)
local n = 0
while true do if a == b then n = n + 1 end end
