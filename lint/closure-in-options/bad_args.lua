local r = host_call("fetch_page", {url = "x", on_done = function() end})
local w = workflow("audit", {check = function() return true end})
return {r, w}
