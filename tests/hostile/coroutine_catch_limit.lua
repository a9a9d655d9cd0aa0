-- A limit hit inside a coroutine, seen by coroutine.resume as a failed resume, again and again.
for _ = 1, 100 do
  local co = coroutine.create(function() while true do end end)
  coroutine.resume(co)
  coroutine.close(co)
end
return "escaped"
