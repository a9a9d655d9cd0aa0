return workflow("summarize", { text = args.text, txt = args.text, ["max_words"] = "200" })
