-- Each operation an upper over 4 MB: one operation, a long copy.
local s = string.rep("x", 4000000)
local n = 0
while true do n = n + #s:upper() end
