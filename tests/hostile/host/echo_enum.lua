-- echo: 100,000 items, each a copy of a 128 KiB enum option: 13 GB.
local s = string.rep("x", 131072)
return agent("x", { schema = { type = "array", minItems = 100000, items = { enum = { s } } } })
