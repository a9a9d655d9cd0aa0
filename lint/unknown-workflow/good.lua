return workflow("summarize", {text = args.text})
