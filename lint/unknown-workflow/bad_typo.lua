return workflow("sumarize", {text = args.text})
