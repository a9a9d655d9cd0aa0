local a = agent(42)
local b = agent({text = "hi"})
return {a, b}
