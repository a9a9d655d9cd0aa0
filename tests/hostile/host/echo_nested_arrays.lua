-- 12 nested arrays with minItems 4 build 16.7 M values from a 600-byte schema.
local s = { type = "integer" }
for i = 1, 12 do s = { type = "array", minItems = 4, items = s } end
return agent("x", { schema = s })
