local function helper() return "result" end
return agent("use " .. tostring(helper()) .. " " .. tostring(42))
