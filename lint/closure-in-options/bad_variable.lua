local format = function(x) return x end
return agent(format, {key = "k"})
