-- Each call a utf8.offset to the 4 millionth character: a walk of 4 MB.
local s = string.rep("0123456789abcdef", 250000)
local n = 0
while true do n = n + (utf8.offset(s, 4000000) or 0) end
