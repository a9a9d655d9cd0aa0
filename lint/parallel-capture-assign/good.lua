-- Each branch returns its value; the combining happens after parallel returns.
local results = parallel(args.items, function(item)
  local words = {}
  for word in item:gmatch("%a+") do
    table.insert(words, word)
  end
  local count = 0
  for _ in ipairs(words) do count = count + 1 end
  return {item = item, count = count, summary = agent("summarize " .. item)}
end, {concurrency = 4})
local total = 0
for _, r in ipairs(results) do
  total = total + r.count
end
local reviews = parallel({
  function() return agent("review tone", {profile = "critic", key = "tone"}) end,
  function() return agent("review facts", {profile = "critic", key = "facts"}) end,
})
return {total = total, reviews = reviews}
