-- The journaled stand-ins, and the standard library the sandbox keeps.
local started = now()
local roll = math.floor(random("roll") * 6) + 1
local id = uuid()
log("info", "started", {at = started, roll = roll, id = id})
local Point = {}
Point.__index = Point
local function point(x, y)
  return setmetatable({x = x, y = y}, Point)
end
function Point:norm()
  return math.sqrt(self.x * self.x + self.y * self.y)
end
local ok, err = pcall(function() error("boom") end)
local words = {}
for word in string.gmatch("a b c", "%a+") do
  table.insert(words, word)
end
table.sort(words)
return {norm = point(3, 4):norm(), ok = ok, err = tostring(err), words = table.concat(words, ","),
  n = utf8.len("héllo"), kind = type(words), first = select(1, "a", "b")}
