-- Like Rhai's index_of: each instruction a plain find over 4 MB.
local s = string.rep("0123456789abcdef", 250000)
local n = 0
while true do n = n + (s:find("z", 1, true) or 1) end
