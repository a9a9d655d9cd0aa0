-- Phase chain: research, then a brief from the research, then a draft from the brief.
-- The Lua twin of phase_chain.rhai: the same calls, the same journal.

-- A list as text, ["a", "b"], as the Rhai twin interpolates it.
local function list_text(items)
  local parts = {}
  for i, item in ipairs(items) do
    local escaped = item:gsub('[\\"\n\r\t]', { ["\\"] = "\\\\", ['"'] = '\\"', ["\n"] = "\\n", ["\r"] = "\\r", ["\t"] = "\\t" })
    parts[i] = '"' .. escaped .. '"'
  end
  return "[" .. table.concat(parts, ", ") .. "]"
end

local subject = args.subject or "content-addressed journals"

local notes = phase("research", function()
  return parallel({ "history", "how it works", "trade-offs" }, function(angle)
    return agent("Research the " .. angle .. " of " .. subject .. ". Cite sources.", { label = "research: " .. angle })
  end)
end)
local brief = phase("brief", function()
  return agent("Write a one-paragraph brief from these notes:\n" .. list_text(notes), { label = "brief" })
end)
local draft = phase("draft", function()
  return agent("Write a 500-word article from this brief:\n" .. brief, { label = "draft" })
end)
return { brief = brief, draft = draft }
