-- An __index that indexes itself, with each key longer than the last.
local t = setmetatable({}, { __index = function(self, k) return self[k .. k] end })
return t.a
