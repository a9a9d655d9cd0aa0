-- Finalizers, to-be-closed values and weak tables are refused, however they are set; then a loop.
pcall(setmetatable, {}, { __gc = function() while true do end end })
pcall(setmetatable, {}, { __mode = "k" })
local mt = {}
local t = setmetatable({}, mt)
pcall(function() mt.__gc = function() while true do end end end)
pcall(function() mt.__close = function() while true do end end end)
pcall(rawset, mt, "__close", function() while true do end end)
pcall(function()
  local x <close> = t
end)
while true do end
