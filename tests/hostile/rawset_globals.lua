-- Replacing pcall and the read-only globals with rawset, then catching a loop with the fake.
pcall(rawset, _G, "args", { escaped = true })
pcall(rawset, _G, "budget", {})
rawset(_G, "pcall", function(f) return true end)
pcall(function() while true do end end)
while true do end
