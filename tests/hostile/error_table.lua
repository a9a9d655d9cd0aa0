-- An error object whose __tostring loops, caught and then printed.
local ok, e = pcall(error, setmetatable({}, { __tostring = function() while true do end end }))
return tostring(e)
