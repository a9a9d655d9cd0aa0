local seen = {}
local function note(x) seen[#seen + 1] = x end
local out = parallel(args.items, function(i)
  note(i)
  return agent("item " .. i)
end)
return {out = out, seen = seen}
