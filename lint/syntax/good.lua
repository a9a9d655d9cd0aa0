-- Lua 5.4 forms lint accepts: attributes, goto, integer division, long strings.
local limit <const> = 3
local text = [[
a long string with "quotes" and ${not_interpolated}
]]
local half = #args.items // 2
for i = 1, limit do
  if i == half then goto done end
end
::done::
return {text = text, half = half}
