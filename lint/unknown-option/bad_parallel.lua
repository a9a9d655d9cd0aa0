return parallel(args.items, function(x) return agent(x) end, {concurency = 4, ["settle_all"] = true})
