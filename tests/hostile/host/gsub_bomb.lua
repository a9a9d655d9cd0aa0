-- Like Rhai's replace: gsub builds its whole result, each "0" becoming 4 KB.
local big = string.rep("0", 4096)
local s = string.rep("0123456789abcdef", 62500)
return #s:gsub("0", big)
