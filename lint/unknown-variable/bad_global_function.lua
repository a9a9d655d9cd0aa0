function shout(text)
  return string.upper(text)
end
return shout(args.text)
