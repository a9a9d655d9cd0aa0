-- Tampering with the string metatable and the string library to lift string.rep's limit.
pcall(function() getmetatable("").__index.rep = function(s) return s end end)
pcall(function() string.rep = function(s) return s end end)
pcall(rawset, string, "rep", function(s) return s end)
local s = ("x"):rep(1e10)
return #s
