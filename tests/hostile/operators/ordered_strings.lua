-- Each instruction orders two 4 MB strings that differ only in their last character.
local a = string.rep("0123456789", 400000) .. "0"
local b = string.rep("0123456789", 400000) .. "1"
local n = 0
while true do if a < b then n = n + 1 end end
