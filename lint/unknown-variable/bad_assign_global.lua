local total = 0
for _, n in ipairs(args.numbers) do
  totl = total + n
end
return total
