local out = pipeline(args.items, {"upper", function(x) return x end})
local s = step("label", "not a function")
return {out, s}
