-- Every declared arg with its type, an optional one left out, a child without a schema,
-- and a table whose computed key hides what it holds.
local short = workflow("summarize", { text = args.text, max_words = 200 })
local long = workflow("summarize", { text = args.text .. " " .. short })
local a = workflow("audit", { anything = 1 })
local key = "text"
local b = workflow("summarize", { [key] = args.text })
return { short, long, a, b }
