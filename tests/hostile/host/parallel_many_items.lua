-- A parallel over 600k items: branch state outside the limit, and no branch cap.
local items = {}
for i = 1, 600000 do items[i] = i end
return parallel(items, function(i) return i end)
