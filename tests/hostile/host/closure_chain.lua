-- A million closures each capturing the previous one, dropped at once by the collector.
local f = function() return 0 end
for i = 1, 1000000 do local g = f; f = function() return g() end end
f = nil
local s = "bomb"
while true do s = s .. s end
