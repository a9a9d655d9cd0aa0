local opts = {label = "draft", max_turns = 3
return agent("write", opts)
