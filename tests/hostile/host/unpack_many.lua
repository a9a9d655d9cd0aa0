-- table.unpack of 900,000 values: one instruction pushes them all.
local t = {}
local n = 0
while true do n = n + select("#", table.unpack(t, 1, 900000)) end
