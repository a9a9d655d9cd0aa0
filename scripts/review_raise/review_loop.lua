-- The Lua twin of review_loop.rhai: three review rounds; raise the ceiling once on resume.
local notes = {}
for round = 0, 2 do
  notes[#notes + 1] = agent("Review round " .. round .. " of the draft; list what to fix.", { max_output_tokens = 16, label = "review " .. round })
end
return notes
