local answer = agent("yes or no?")
if answer != "yes" then
  return nil
end
return answer
