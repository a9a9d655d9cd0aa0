return agent("classify", {schema = {type = "objekt"}})
