print("starting")
debug.traceback()
collectgarbage()
return 1
