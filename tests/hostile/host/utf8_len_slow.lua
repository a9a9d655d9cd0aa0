-- Each call a utf8.len over 4 MB: it walks the string, allocating nothing.
local s = string.rep("0123456789abcdef", 250000)
local n = 0
while true do n = n + utf8.len(s) end
