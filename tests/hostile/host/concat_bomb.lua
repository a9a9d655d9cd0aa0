-- table.concat of a thousand references to one 1 MB string: one call, a 1 GB result.
local s = string.rep("x", 1000000)
local t = {}
for i = 1, 1000 do t[i] = s end
return #table.concat(t)
