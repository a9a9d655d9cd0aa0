local n = #args.items // count
return n
