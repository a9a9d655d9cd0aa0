local parts = string.split(args.csv, ",")
local all = table.join(parts, ";")
local n = math.round(2.5)
local u = string.uper("x")
return {all, n, u}
