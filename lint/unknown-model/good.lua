return agent("x", {model = "echo:default"})
