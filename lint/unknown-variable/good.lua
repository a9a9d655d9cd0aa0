local function shout(text)
  return string.upper(text)
end
local total = 0
for _, n in ipairs(args.numbers) do
  total = total + n
end
local best = nil
repeat
  local done = true
until done
return {total = total, loud = shout(args.text), best = best}
