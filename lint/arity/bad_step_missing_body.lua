local r = step("fetch")
local p = phase("draft")
return {r, p}
