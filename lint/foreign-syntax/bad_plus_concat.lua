local name = args.name
return agent("hello " + name)
