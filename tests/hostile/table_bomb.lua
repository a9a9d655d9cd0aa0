-- Tables of tables until memory or the budget runs out.
local t = {}
local i = 0
while true do
  i = i + 1
  t[i] = { i, tostring(i), { i } }
end
