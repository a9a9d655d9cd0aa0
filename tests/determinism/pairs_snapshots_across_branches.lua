-- Issue 24 item 5: nine branches each traverse a table with `pairs`, clearing each entry once
-- its call is answered. `pairs` snapshots were shared between branches (eight kept): a branch
-- resuming its traversal after a call found its snapshot evicted by a sibling's, took a fresh
-- one without the key it had just cleared and failed "invalid key to 'next'" on some runs.
local branches = {}
for b = 1, 9 do
  branches[b] = function()
    local todo = { alpha = 1, beta = 2, gamma = 3 }
    local seen = {}
    for k, v in pairs(todo) do
      seen[#seen + 1] = agent('branch ' .. b .. ' ' .. k .. ' ' .. v)
      todo[k] = nil
    end
    local n = 0
    for _ in next, todo do n = n + 1 end
    return table.concat(seen, ', ') .. ' left ' .. n
  end
end
return parallel(branches)
