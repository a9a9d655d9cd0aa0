-- string.rep of an empty string a quadrillion times (a C loop), then of a real one.
local empty = string.rep("", 1e15)
local huge = string.rep("ab", 1e12, ",")
return #empty + #huge
