-- Each step result is copied into host memory (the journal and the step cache).
local s = string.rep("x", 1000000)
local i = 0
while true do
  i = i + 1
  step("s" .. i, function() return s end)
end
