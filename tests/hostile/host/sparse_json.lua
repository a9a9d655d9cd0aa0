-- A sparse table crosses the JSON boundary as 13 M nulls.
local i = 0
while true do
  i = i + 1
  step("s" .. i, function() return { [13e6] = 1 } end)
end
