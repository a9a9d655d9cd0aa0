-- A captured table's own __index, reached through a branch's read-only view of it, raises a
-- table: the branch catches the table it raised, and a second branch lets one escape. Before,
-- the view called the __index from Rust and the value became `table: 0x...` text.
local base = setmetatable({}, {__index = function(_, k) error({missing = k}) end})
local seen = parallel({function()
  local ok, e = pcall(function() return base.x end)
  return type(e) == "table" and e.missing or tostring(e)
end})
agent("view " .. seen[1])
return parallel({function() return base.y end})
