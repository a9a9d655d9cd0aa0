local Stack = {}
Stack.__index = Stack
function Stack:push(value)
  self[#self + 1] = value
end
local stack = setmetatable({}, Stack)
stack:push(1)
local parts = {}
for part in args.csv:gmatch("[^,]+") do
  parts[#parts + 1] = part:upper()
end
return {joined = table.concat(parts, ";"), spent = budget.spent(), left = budget.remaining(), n = #stack}
