local out = parallel(args.items, |item| agent(item))
return out
