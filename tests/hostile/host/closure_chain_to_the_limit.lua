-- Closures each capturing the previous one, built inside a function until the run's memory limit
-- ends it, then dropped with the function's frame: Lua's collector frees the chain iteratively.
local function build()
  local f = function() return 0 end
  while true do
    local g = f
    f = function() return g() end
  end
end
build()
