-- Code review: three independent reviewers read the same diff in parallel, then a lead
-- reviewer merges their findings into one verdict with a fixed shape.
-- The Lua twin of code_review.rhai: the same calls, the same journal.

-- A list as text, ["a", "b"], as the Rhai twin interpolates it.
local function list_text(items)
  local parts = {}
  for i, item in ipairs(items) do
    local escaped = item:gsub('[\\"\n\r\t]', { ["\\"] = "\\\\", ['"'] = '\\"', ["\n"] = "\\n", ["\r"] = "\\r", ["\t"] = "\\t" })
    parts[i] = '"' .. escaped .. '"'
  end
  return "[" .. table.concat(parts, ", ") .. "]"
end

local diff = args.diff or "fn add(a: i32, b: i32) -> i32 { a - b }"

local reviews = parallel({
  function() return agent("Review this diff for correctness bugs:\n" .. diff, { key = "correctness", label = "correctness" }) end,
  function() return agent("Review this diff for security problems:\n" .. diff, { key = "security", label = "security" }) end,
  function() return agent("Review this diff for readability:\n" .. diff, { key = "readability", label = "readability" }) end,
}, { settle = true })

local usable = {}
for _, review in ipairs(reviews) do
  if review.status == "ok" then usable[#usable + 1] = review.value end
end

local verdict = agent("Merge these reviews into a verdict:\n" .. list_text(usable), {
  label = "lead reviewer",
  schema = {
    type = "object",
    required = { "approve", "summary" },
    properties = { approve = { type = "boolean" }, summary = { type = "string" } },
  },
})
return { reviews = #usable, verdict = verdict }
