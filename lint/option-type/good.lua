return agent("classify", {on_error = "null", max_turns = 2, schema = {type = "object", properties = {ok = {type = "boolean"}}}, tools = {}})
