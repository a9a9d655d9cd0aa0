local fs = parallel(args.items, (item) => agent(item))
return fs
