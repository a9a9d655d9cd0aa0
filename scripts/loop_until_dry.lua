-- Loop until dry: keep asking for new ideas until a round brings nothing new (or 5 rounds).
-- The Lua twin of loop_until_dry.rhai: the same calls, the same journal.

-- A list as text, ["a", "b"], as the Rhai twin interpolates it.
local function list_text(items)
  local parts = {}
  for i, item in ipairs(items) do
    local escaped = item:gsub('[\\"\n\r\t]', { ["\\"] = "\\\\", ['"'] = '\\"', ["\n"] = "\\n", ["\r"] = "\\r", ["\t"] = "\\t" })
    parts[i] = '"' .. escaped .. '"'
  end
  return "[" .. table.concat(parts, ", ") .. "]"
end

local function contains(items, wanted)
  for _, item in ipairs(items) do
    if item == wanted then return true end
  end
  return false
end

local seen = {}
local round = 0
while round < 5 do
  local idea = agent("Round " .. round .. ": suggest one new idea not in " .. list_text(seen) .. ".", {
    key = "idea-" .. round,
    label = "round " .. round,
  })
  if contains(seen, idea) then
    break
  end
  seen[#seen + 1] = idea
  round = round + 1
end
return { rounds = round, ideas = seen }
