local name = args.fn
return _G[name]("prompt")
