local topic = args.topic
local a = agent("Summarize:\n" .. topic)
local b = agent([[Done.
Then stop]])
-- a comment [[ with \n ]] is no string
local c = "[[\\n]]"
return {a, b, c}
