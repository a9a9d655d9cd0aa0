-- The Lua twin of prompt_flood.rhai: one 512 KiB prompt handed to the engine over and over.
local s = string.rep("x", 524288)
local n = 0
while true do n = n + agent(s, {schema = {type = "integer"}}) end
