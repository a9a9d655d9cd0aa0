-- Catastrophic backtracking: a pattern of lazy items over a long subject with no match.
local s = string.rep("a", 50000)
return string.find(s, ".-.-.-.-b")
