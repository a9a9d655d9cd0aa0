-- Deploy with approval: plan a deploy, wait for a person to approve it, then roll it out.
-- The run suspends at await_external; resolve it with
--   cairn resolve RUN deploy-approval '{"approved": true}'   and then   cairn resume RUN
-- The Lua twin of deploy_approval.rhai: the same calls, the same journal.

-- A list as text, ["a", "b"], as the Rhai twin interpolates it.
local function list_text(items)
  local parts = {}
  for i, item in ipairs(items) do parts[i] = '"' .. item .. '"' end
  return "[" .. table.concat(parts, ", ") .. "]"
end

local service = args.service or "billing"

local plan = agent("Write a rollout plan for deploying " .. service .. ", with a rollback step.", { label = "plan" })
local answer = await_external("deploy-approval", {
  prompt = "Approve the rollout plan for " .. service .. "?",
  schema = { type = "object", required = { "approved" }, properties = { approved = { type = "boolean" } } },
})
if not answer.approved then
  return { service = service, deployed = false }
end
local steps = step("rollout", function() return { "canary 5%", "50%", "100%" } end)
local report = agent("Summarize the rollout of " .. service .. " through " .. list_text(steps) .. ".", { label = "report" })
return { service = service, deployed = true, steps = steps, report = report }
