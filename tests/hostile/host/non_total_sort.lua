-- A comparator that is not a total order: the sort's result is whatever the algorithm left.
local a = {}
for i = 1, 5000 do a[i] = (i * 7919) % 5000 end
table.sort(a, function(x, y) return (x ~ y) % 3 == 1 end)
return #a
