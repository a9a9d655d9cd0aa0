return agent("x", {model = "openai:gpt-6"})
