local topic = args.topic
local a = agent([[Summarize:\n]] .. topic)
return a
