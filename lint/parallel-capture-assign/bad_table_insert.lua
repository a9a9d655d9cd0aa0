local results = {}
parallel(args.items, function(item)
  table.insert(results, agent(item))
end)
return results
