-- A gsub replacement that loops forever, under pcall: the replacement is called from Lua
-- under the raw pcall (so what it raises keeps its value); the limit it trips must still end
-- the run, not be handed back to the script as a caught value.
local ok = pcall(string.gsub, "abc", "%w", function() while true do end end)
local ok2 = pcall(function() return ("abc"):gsub("%w", setmetatable({}, {__index = function() while true do end end})) end)
return "swallowed " .. tostring(ok) .. tostring(ok2)
