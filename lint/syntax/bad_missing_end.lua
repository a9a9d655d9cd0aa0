local function summarize(text)
  return agent("summarize: " .. text)

return summarize(args.text)
