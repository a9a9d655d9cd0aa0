local function agent(prompt)
  return prompt
end
local parallel = 1
now = function() return 0 end
string.shout = function(s) return s:upper() end
return agent("x")
