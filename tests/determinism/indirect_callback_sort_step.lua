-- expect: calling 'by', which writes captured variable 'seen'
-- A comparator that writes captured state, handed to table.sort inside a step body (issue 24
-- item 3): a replay serves the step without running it, so the write would be lost.
local seen = {n = 0}
local function by(a, b) seen.n = seen.n + 1 return a < b end
local sorted = step('sort', function() local xs = {3, 1, 2} table.sort(xs, by) return xs end)
return agent('sorted ' .. table.concat(sorted, ',') .. ' after ' .. seen.n)
