local a = agent()
local b = agent("prompt", {label = "x"}, "extra")
return {a, b}
