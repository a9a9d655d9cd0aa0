-- Writes through other names that stay inside the branch: a table the branch made, aliased
-- and passed to a helper; a loop over a captured table that only reads it.
local tasks = {{name = 'x'}, {name = 'y'}}
local function add(t, v) t[#t + 1] = v end
return parallel({
  function()
    local mine = {}
    local alias = mine
    alias.first = true
    add(mine, 1)
    local names = {}
    for _, t in ipairs(tasks) do add(names, t.name) end
    local first = tasks[1]
    return agent('a ' .. first.name .. ' ' .. #names .. ' ' .. #mine)
  end,
  function() return agent('b') end,
})
