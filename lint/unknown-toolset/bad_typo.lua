return agent("search", {tools = {"webb"}})
