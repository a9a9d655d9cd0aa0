args.topic = "other"
args = {}
table.insert(args.items, 1)
return args
