-- A gsub replacement (a function, or a table's __index) that raises a table: the script
-- catches the table it raised, then raises one uncaught. Before, the value crossed Rust and
-- became `table: 0x...` text, an address that differs from run to run, in the prompt and in
-- the run's error.
local function said(e) return type(e) == "table" and e.at or tostring(e) end
local ok, e = pcall(string.gsub, "abc", "%w", function(c) error({at = c}) end)
local lookup = setmetatable({}, {__index = function(_, k) error({at = k .. "!"}) end})
local ok2, e2 = pcall(function() return ("xyz"):gsub("y", lookup) end)
agent("caught " .. tostring(ok) .. " " .. said(e) .. " " .. tostring(ok2) .. " " .. said(e2))
return string.gsub("abc", "b", function(c) error({code = "script_error", message = "gsub raised at " .. c}) end)
