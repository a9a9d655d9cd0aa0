-- Closures each holding a large upvalue.
local keep = {}
for i = 1, 1e9 do
  local big = string.rep("x", 4096) .. i
  keep[i] = function() return big end
end
return #keep
