local out = parallel({agent("a"), agent("b")})
return out
