def summarize(text):
    return agent(text)

return summarize(args.text)
