-- Researches a subject from three angles in parallel and returns the notes.
-- @args subject?: string
local subject = args.subject or "content-addressed journals"
local angles = { "history", "how it works", "trade-offs" }
return parallel(angles, function(angle)
  return agent("Research the " .. angle .. " of " .. subject .. ". Cite sources.", { label = "research: " .. angle })
end)
