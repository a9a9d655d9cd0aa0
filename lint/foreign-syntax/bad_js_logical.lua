local a = agent("first")
if a && args.strict then
  return a
end
return nil
