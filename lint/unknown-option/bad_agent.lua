return agent("write", {max_turn = 3, lable = "draft"})
