-- A table's __pairs raises a table: the script catches the table it raised, then lets one
-- escape. Before, `pairs` called the metamethod from Rust and the value became
-- `table: 0x...` text.
local t = setmetatable({}, {__pairs = function(self) error({no = "pairs"}) end})
local ok, e = pcall(pairs, t)
agent("pairs " .. tostring(ok) .. " " .. (type(e) == "table" and e.no or tostring(e)))
for k in pairs(setmetatable({}, {__pairs = function() error({code = "script_error", message = "no pairs"}) end})) do end
return 1
