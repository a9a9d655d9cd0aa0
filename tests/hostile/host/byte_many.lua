-- string.byte of 900,000 positions: one instruction pushes them all.
local s = string.rep("x", 1000000)
local n = 0
while true do n = n + select("#", string.byte(s, 1, 900000)) end
