-- A loop that never ends: the instruction budget stops it.
while true do end
