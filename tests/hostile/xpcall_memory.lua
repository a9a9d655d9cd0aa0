-- Catching the memory limit with xpcall and a handler that swallows it.
for _ = 1, 100 do
  xpcall(function()
    local s = "x"
    while true do s = s .. s end
  end, function() return "handled" end)
end
return "escaped"
