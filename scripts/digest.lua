-- Digest: fan out over topics, summarize each, then merge the summaries into one digest.
-- Run: cairn run scripts/digest.lua --args '{"topics": ["rust", "sqlite", "llm agents"]}'
-- The Lua twin of digest.rhai: the same calls, the same journal.

-- A list as text, ["a", "b"], as the Rhai twin interpolates it.
local function list_text(items)
  local parts = {}
  for i, item in ipairs(items) do
    local escaped = item:gsub('[\\"\n\r\t]', { ["\\"] = "\\\\", ['"'] = '\\"', ["\n"] = "\\n", ["\r"] = "\\r", ["\t"] = "\\t" })
    parts[i] = '"' .. escaped .. '"'
  end
  return "[" .. table.concat(parts, ", ") .. "]"
end

local topics = args.topics or { "durable workflows", "budgets", "replay" }

local summaries = parallel(topics, function(topic)
  return agent("Summarize this week's news about " .. topic .. " in three bullet points.", {
    label = "summary: " .. topic,
    max_output_tokens = 400,
  })
end)

local digest = phase("merge", function()
  return agent("Merge these summaries into a one-page digest with a headline:\n" .. list_text(summaries), {
    label = "digest",
    role = "synthesize",
  })
end)

log("info", "digest ready", { topics = #topics })
return { topics = topics, summaries = summaries, digest = digest }
