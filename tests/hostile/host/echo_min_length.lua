-- minLength huge pads quadratically and cannot be cancelled.
return agent("x", { schema = { type = "string", minLength = 100000000000 } })
