return agent("write", {label = function() return "x" end})
