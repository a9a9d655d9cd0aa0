log("info", "done", {callback = function() end})
return parallel({function() return 1 end}, {label = function() end})
