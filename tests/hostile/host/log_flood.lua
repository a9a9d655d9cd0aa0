-- Log data is kept in the run's events.
local s = string.rep("x", 1000000)
while true do log("info", "x", { d = s }) end
