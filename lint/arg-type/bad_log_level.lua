log("information", "starting")
return 1
