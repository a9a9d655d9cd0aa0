local n = len(args.items)
for i in range(n) do
  log("info", str(i))
end
return n
