return agent("write", {max_turns = 3, label = "draft", ["key"] = "k1"})
