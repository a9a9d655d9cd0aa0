return agent(`summarize ${args.text}`)
