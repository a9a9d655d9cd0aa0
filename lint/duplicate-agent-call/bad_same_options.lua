local a = agent("review", {profile = "critic"})
local b = agent("review", {profile = "critic"})
return {a, b}
