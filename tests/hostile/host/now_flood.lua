-- Each now() is one operation for the script but a journal entry the host keeps.
local n = 0
while true do now(); n = n + 1 end
