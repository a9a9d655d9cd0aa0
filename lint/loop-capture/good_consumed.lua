-- A function a global runs before it returns cannot outlive the iteration it was made in, even
-- when it captures a variable the loop reassigns.
local out = {}
local i = 0
while i < #args.questions do
  i = i + 1
  out[#out + 1] = parallel({ function() return agent("pro " .. args.questions[i]) end })
  out[#out + 1] = parallel(args.angles, function(angle) return agent(args.questions[i] .. " from " .. angle) end)
  out[#out + 1] = pipeline(args.items, { function(item) return agent(args.questions[i] .. ": " .. item) end })
  out[#out + 1] = phase("phase " .. i, function() return agent("summarize " .. args.questions[i]) end)
end
return out
