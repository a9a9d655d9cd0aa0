local n = #args.items
if n == 0 then
  return "none"
elif n == 1 then
  return "one"
end
return "many"
