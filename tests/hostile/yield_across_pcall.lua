-- Yields across pcall inside a coroutine, and a yield outside any coroutine (refused), in a
-- loop that catches everything it can.
pcall(coroutine.yield, "out of the run")
local co = coroutine.create(function()
  while true do pcall(coroutine.yield, 1) end
end)
while true do
  local ok = coroutine.resume(co)
  if not ok then co = coroutine.create(function() while true do end end) end
end
