return workflow("translate", {text = args.text})
