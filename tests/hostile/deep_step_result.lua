-- A step result nested far deeper than the JSON boundary allows.
return step("deep", function()
  local t = {}
  local cur = t
  for _ = 1, 100000 do
    local next_level = {}
    cur[1] = next_level
    cur = next_level
  end
  return t
end)
