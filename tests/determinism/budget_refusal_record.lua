-- Issue 24 item 6: a budget refusal (the result="full" record, a settled branch, a collected
-- pipeline item) replays byte for byte as it read live: status `limit`, cost 0, the same message.
-- `determinism_steps` runs it under a ceiling the echo price cannot fit.
local full = agent("hi", {result = "full"})
local settled = parallel({function() return agent("a") end}, {settle = true})
local piped = pipeline({"x"}, {function(item) return agent("p " .. item) end}, {on_item_error = "collect"})
return {full = full, settled = settled, piped = piped}
