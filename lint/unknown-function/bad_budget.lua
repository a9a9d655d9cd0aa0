local left = budget.left()
return left
