local function helper() end
return agent(string.format("call %s", helper))
