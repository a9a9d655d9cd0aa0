local best = null
for _, x in ipairs(args.items) do
  if best == None or x > best then best = x end
end
return best
