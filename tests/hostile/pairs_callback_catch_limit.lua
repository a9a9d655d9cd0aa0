-- A __pairs that loops forever, under pcall (pairs calls it from Lua): the limit ends the run.
local t = setmetatable({}, {__pairs = function() while true do end end})
local ok = pcall(pairs, t)
return "swallowed " .. tostring(ok)
