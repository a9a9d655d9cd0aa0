local n = #args.items // count the items
return n
