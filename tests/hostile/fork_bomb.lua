-- Fan-outs nested without end.
local function bomb(depth)
  return parallel({ 1, 2, 3, 4, 5, 6, 7, 8 }, function() return bomb(depth + 1) end)
end
return bomb(0)
