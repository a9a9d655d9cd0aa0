local branches = {}
local topic
for _, t in ipairs(args.topics) do
  topic = t
  table.insert(branches, function() return agent("research " .. topic) end)
end
return parallel(branches)
