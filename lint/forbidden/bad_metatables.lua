local cache = setmetatable({}, {__mode = "k"})
local guard = setmetatable({}, {__gc = function() log("info", "collected") end})
local mt = {}
mt.__gc = function() end
return 1
