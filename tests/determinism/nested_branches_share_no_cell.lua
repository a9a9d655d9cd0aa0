-- Issue 24 item 3: the branches of a fan-out nested in a branch reached a function through a
-- table the outer branch captured; the outer branch's private copy of that function, with its
-- cell, was shared by every inner branch, so one inner branch's write was seen by whichever
-- siblings called after it: which ones depended on timing. Each inner branch now copies what it
-- reaches for itself; the write is refused in the branch that made it.
local n = 0
local ops = {}
ops.bump = function() n = n + 1 return n end
return parallel({0, 1}, function(o)
  return parallel({0, 1, 2, 3}, function(i)
    local a = agent('first ' .. o .. i)
    if i == 0 then ops.bump() end
    return a .. agent('second ' .. o .. i .. ' n=' .. n)
  end)
end)
