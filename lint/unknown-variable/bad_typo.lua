local topic = args.topic
local draft = agent("write about " .. tpoic)
return draft
