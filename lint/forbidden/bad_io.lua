local f = io.open("notes.txt")
local home = os.getenv("HOME")
return f:read("a") .. home
