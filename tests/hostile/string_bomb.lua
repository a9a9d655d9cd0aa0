-- Doubling a string until memory runs out: the state's byte limit stops it.
local s = "x"
while true do s = s .. s end
