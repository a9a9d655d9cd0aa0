local started = os.time()
local roll = math.random(1, 6)
local elapsed = os.clock()
return {started = started, roll = roll, elapsed = elapsed}
