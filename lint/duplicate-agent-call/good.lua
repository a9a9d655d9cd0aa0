local a = agent("write a haiku", {key = "first"})
local b = agent("write a haiku", {key = "second"})
local c = agent("write a limerick")
return {a, b, c}
