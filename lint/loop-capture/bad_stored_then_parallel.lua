-- Built in the loop, run after it: every branch sees the value the loop left in i.
local branches = {}
local i = 0
while i < #args.questions do
  i = i + 1
  local ask = function() return agent("pro " .. args.questions[i]) end
  branches[#branches + 1] = ask
end
return parallel(branches)
