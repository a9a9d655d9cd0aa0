local b = agent([==[Done.\tThen stop]==])
return b
