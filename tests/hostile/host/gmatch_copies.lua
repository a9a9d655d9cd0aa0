-- Each gmatch iterator held a copy of the subject: a thousand iterators, a thousand copies.
local s = string.rep("x", 4000000)
local its = {}
while true do its[#its + 1] = s:gmatch("x") end
