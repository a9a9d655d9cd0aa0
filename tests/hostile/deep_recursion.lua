-- Unbounded recursion: Lua's stack overflows, which ends the run like a sandbox limit.
local function f(n) return 1 + f(n + 1) end
return f(1)
