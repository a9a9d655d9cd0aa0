local handlers = {
  upper = function(s) return s:upper() end,
  lower = function(s) return s:lower() end,
}
local handler = handlers[args.mode] or handlers.upper
return handler(agent("write"))
