return agent("search", {tools = {"web", "files"}})
