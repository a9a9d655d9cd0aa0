-- Every branch fills memory at once.
return parallel({ 1, 2, 3, 4, 5, 6, 7, 8 }, function(i)
  local t = {}
  for j = 1, 1e9 do t[j] = string.rep("x", 1000) .. j end
  return #t
end)
