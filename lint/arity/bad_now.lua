local t = now("ms")
local id = uuid(1)
return {t, id}
