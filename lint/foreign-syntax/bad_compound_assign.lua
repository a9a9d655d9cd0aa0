local count = 0
for _, item in ipairs(args.items) do
  count += 1
end
return count
