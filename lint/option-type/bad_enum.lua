return agent("write", {on_error = "ignore", effort = "hgh"})
