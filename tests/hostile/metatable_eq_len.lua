-- An __eq that loops, and a __len that claims a quadrillion elements to table.insert.
local mt = { __eq = function() while true do end end, __len = function() return 1e15 end }
local a, b = setmetatable({}, mt), setmetatable({}, mt)
pcall(function() return a == b end)
table.insert(a, 1, "x")
return "escaped"
