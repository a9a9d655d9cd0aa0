local log_lines = {}
function log_lines:add(x) self[#self + 1] = x end
pipeline(args.items, {function(x) log_lines:add(x) return x end})
return log_lines
