local g = _G
rawset(args, "x", 1)
local v = rawget(args, "x")
local co = coroutine.create(function() end)
local s = string.dump(function() end)
setfenv(1, {})
return v
