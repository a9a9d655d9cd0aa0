return agent("search", {tools = {"web", "shell"}})
