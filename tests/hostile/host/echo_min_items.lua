-- The echo model trusts the schema: minItems 1e10 asks for a 320 GB buffer.
return agent("x", { schema = { type = "array", minItems = 10000000000, items = { type = "integer" } } })
