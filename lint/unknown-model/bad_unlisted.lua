return agent("x", {model = "mistral:large"})
