local a = agent("write a haiku")
local b = agent("write a haiku")
return {a, b}
