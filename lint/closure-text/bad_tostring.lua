local f = function() return 1 end
return agent("run " .. tostring(f))
