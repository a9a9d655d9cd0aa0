-- Draft, review and publish release notes for one repository.
-- Input: args.repo (owner/name) and args.since (a tag). Output: the published
-- notes with the publishing receipt, or the draft when publishing is declined.
-- The Lua twin of the Rhai lint benchmark's workload: phases, fan-out in both
-- forms, a pipeline, steps, host calls, a child workflow, a human approval and
-- structured output.
local repo = args.repo
local since = args.since
local started = now()
log("info", "release notes started", {repo = repo, since = since})

local commit_schema = {
  type = "object",
  properties = {
    kind = {type = "string", enum = {"feature", "fix", "chore", "docs"}},
    summary = {type = "string"},
    breaking = {type = "boolean"},
  },
  required = {"kind", "summary", "breaking"},
}

local review_schema = {
  type = "object",
  properties = {
    ok = {type = "boolean"},
    problems = {type = "array", items = {type = "string"}},
  },
  required = {"ok", "problems"},
}

local titles = {
  feature = "New features",
  fix = "Fixes",
  docs = "Documentation",
}

local function section_title(kind)
  return titles[kind] or "Other changes"
end

local function group_by_kind(items)
  local groups = {}
  for _, item in ipairs(items) do
    if item ~= nil then
      local kind = item.kind
      if groups[kind] == nil then
        groups[kind] = {}
      end
      table.insert(groups[kind], item)
    end
  end
  return groups
end

local function render_section(title, items)
  local lines = {"## " .. title, ""}
  for _, item in ipairs(items) do
    local marker = item.breaking and " (breaking)" or ""
    lines[#lines + 1] = "- " .. item.summary .. marker
  end
  return table.concat(lines, "\n") .. "\n"
end

local commits = phase("collect", function()
  local raw = host_call("search_docs", {repo = repo, since = since, kind = "commits"},
    {key = "commits-" .. repo})
  local pages = host_call("fetch_page", {url = "https://example.com/" .. repo .. "/compare"},
    {on_error = "null"})
  local listed = step("normalize commits", function()
    local out = {}
    for _, c in ipairs(raw) do
      local message = c.message:match("^%s*(.-)%s*$")
      if #message > 0 then
        out[#out + 1] = {sha = c.sha, message = message}
      end
    end
    return out
  end, {deps = {repo, since}})
  return {commits = listed, compare = pages}
end)

local classified = phase("classify", function()
  return parallel(commits.commits, function(commit)
    return agent(
      "Classify this commit and summarize it in one line:\n" .. commit.message,
      {
        profile = "researcher",
        schema = commit_schema,
        max_turns = 2,
        max_output_tokens = 400,
        on_error = "null",
        label = "classify",
      }
    )
  end, {concurrency = 8, label = "classify commits"})
end)

local groups = group_by_kind(classified)
local kinds = {}
for kind in pairs(groups) do
  kinds[#kinds + 1] = kind
end
table.sort(kinds)

local sections = phase("draft", function()
  return pipeline(kinds, {
    function(kind)
      return {kind = kind, text = render_section(section_title(kind), groups[kind])}
    end,
    function(section)
      return agent(
        "Polish this release notes section. Keep every item, fix grammar only:\n" .. section.text,
        {profile = "writer", max_turns = 3, key = "polish-" .. section.kind}
      )
    end,
  }, {on_item_error = "collect", concurrency = 4})
end)

local draft = "# " .. repo .. " release notes\n\n" .. table.concat(sections.results, "\n")

local reviews = phase("review", function()
  return parallel({
    function()
      return agent("Check these notes for missing breaking changes:\n" .. draft, {
        profile = "critic",
        schema = review_schema,
        key = "review-breaking",
        effort = "high",
      })
    end,
    function()
      return agent("Check these notes for tone and clarity:\n" .. draft, {
        profile = "critic",
        schema = review_schema,
        key = "review-tone",
      })
    end,
    function()
      return workflow("audit", {text = draft, repo = repo}, {budget = 0.5, on_error = "null"})
    end,
  }, {settle = true, label = "reviews"})
end)

-- Collect every problem the reviewers reported; a failed reviewer is itself
-- a problem, so the revision sees it.
local problems = {}
for _, review in ipairs(reviews) do
  if review.status ~= "ok" then
    problems[#problems + 1] = "a reviewer failed: " .. tostring(review.error)
  elseif type(review.value) == "table" and review.value.problems ~= nil then
    for _, problem in ipairs(review.value.problems) do
      problems[#problems + 1] = problem
    end
  end
end

local final_text = draft
if #problems > 0 then
  log("warn", "reviewers found problems", {count = #problems})
  final_text = agent(
    "Revise the notes to fix these problems:\n" .. table.concat(problems, "\n") .. "\n\nNotes:\n" .. draft,
    {
      profile = "writer",
      max_turns = 4,
      key = "revise",
      result = "value",
    }
  )
end

-- Budget check before the paid tail of the run: publishing and the sampled audit.
local spent = budget.spent()
local left = budget.remaining()
if left ~= nil and left < 1.0 then
  log("warn", "little budget left before publishing", {left = left})
end

local approval = await_external("publish-approval", {
  prompt = "Publish the " .. repo .. " release notes? " .. #problems .. " problems were fixed.",
  schema = {
    type = "object",
    properties = {approved = {type = "boolean"}, note = {type = "string"}},
    required = {"approved"},
  },
})

if not approval.approved then
  log("info", "publishing declined", {note = approval.note})
  return {published = false, draft = final_text, spent = spent}
end

local receipt = host_call("fetch_page", {url = "https://example.com/" .. repo .. "/publish", body = final_text}, {
  key = "publish-" .. repo,
  label = "publish",
})

-- One in ten runs gets an independent summary, sampled deterministically:
-- random() is journaled, so a resumed run makes the same choice.
local run_id = uuid()
local sample = random("audit-sample")
if sample < 0.1 then
  workflow("summarize", {text = final_text}, {key = "sampled-summary", on_error = "null"})
end

local finished = now()
log("info", "release notes published", {
  repo = repo,
  ms = finished - started,
  sections = #kinds,
  run = run_id,
})

return {
  published = true,
  receipt = receipt,
  sections = kinds,
  problems = problems,
  spent = spent,
  text = final_text,
}
