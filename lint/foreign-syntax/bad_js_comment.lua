// draft the summary
return agent("summarize " .. args.text)
