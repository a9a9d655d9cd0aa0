-- echo: 100,000 strings, each compiling a costly pattern anew.
return agent("x", { schema = { type = "array", minItems = 100000, items = { type = "string", pattern = "(\\w{30}\\d{30}){40}" } } })
