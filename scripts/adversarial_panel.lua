-- Adversarial panel: a proposer and a critic argue for two rounds, then a judge decides.
-- The Lua twin of adversarial_panel.rhai: the same calls, the same journal.
local question = args.question or "Should we rewrite the service in Rust?"

local proposal = agent("Argue for: " .. question, { label = "proposer", key = "proposal-0" })
local critique = agent("Find the weakest point in this argument:\n" .. proposal, { label = "critic", key = "critique-0" })
local rebuttal = agent("Answer this critique of your argument:\n" .. critique, { label = "proposer", key = "proposal-1" })
local final_critique = agent("Is the rebuttal convincing?\n" .. rebuttal, { label = "critic", key = "critique-1" })

local ruling = phase("judge", function()
  return agent(
    "Question: " .. question .. "\nFor: " .. proposal .. "\n" .. rebuttal .. "\nAgainst: " .. critique .. "\n"
      .. final_critique .. "\nRule on it.",
    {
      label = "judge",
      role = "finalize",
      schema = {
        type = "object",
        required = { "ruling", "reason" },
        properties = { ruling = { enum = { "yes", "no" } }, reason = { type = "string" } },
      },
    }
  )
end)
return { question = question, ruling = ruling }
