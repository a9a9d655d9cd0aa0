local a = agent("write", "draft")
local b = agent("write", {"draft", 3})
return {a, b}
