-- Each instruction indexes a table by a 4 MB key equal to (but distinct from) the table's own.
local k = string.rep("0123456789", 400000)
local q = string.rep("0123456789", 400000)
local t = { [k] = 1 }
local n = 0
while true do n = n + t[q] end
