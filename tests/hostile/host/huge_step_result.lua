-- A step returns a table of a hundred thousand 1 KB strings: converted to JSON and kept.
return step("big", function()
  local x = string.rep("x", 1000)
  local t = {}
  for i = 1, 100000 do t[i] = x .. i end
  return t
end)
