-- Replacing the globals' metatable to hide a loop in every global read.
pcall(setmetatable, _G, { __index = function() while true do end end })
local x = not_a_global
while true do end
