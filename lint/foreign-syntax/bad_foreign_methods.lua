local out = {}
for _, item in ipairs(args.items) do
  out:push(agent(item))
end
return out:join(", ")
