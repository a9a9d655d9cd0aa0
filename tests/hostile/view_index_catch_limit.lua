-- A captured table's __index that loops forever, reached through a branch's read-only view
-- under pcall: the limit ends the run.
local base = setmetatable({}, {__index = function() while true do end end})
local r = parallel({function() return pcall(function() return base.x end) end})
return "swallowed " .. tostring(r[1])
