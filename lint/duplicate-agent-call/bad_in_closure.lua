return step("twice", function()
  local a = agent("guess")
  local b = agent("guess")
  return {a, b}
end)
