-- The Lua forms of what other languages write differently.
local topic = args.topic                         -- not const/let
local answer = agent("yes or no: " .. topic)     -- .. joins text, not +
if answer ~= "yes" and not args.strict then      -- ~=, and, not
  return nil                                     -- nil, not null/None
elseif #answer > 3 then                          -- elseif, #t for length
  answer = answer:upper()
end
local out = parallel(args.items, function(item)  -- function ... end, not => or |x|
  return agent("summarize " .. item, {label = "summary"})  -- {key = value}, not #{key: value}
end)
local parts = {}
for part in answer:gmatch("%a+") do table.insert(parts, part) end
return {answer = answer, out = out, joined = table.concat(parts, ", "), half = #parts // 2}
