local xs = {1, 2, 3}
local m = {n = 0}
local notes = {}
local out = {}
local function map(t, f) local r = {} for i, v in ipairs(t) do r[i] = f(v) end return r end
local function filter(t, f) local r = {} for _, v in ipairs(t) do if f(v) then r[#r + 1] = v end end return r end
local function copy(t) local r = {} for i, v in ipairs(t) do r[i] = v end return r end
local function for_each(t, f) for _, v in ipairs(t) do f(v) end end
local v1 = parallel(xs, function(i) return agent('p1 item ' .. i .. ' ' .. m.n) end) out[#out + 1] = #v1
local ok2, e2 = pcall(parallel, {function() error('no 2 4') end, function() return 4 end}) notes[#notes + 1] = type(e2) == 'table' and e2.message or tostring(e2)
return {fin = agent('end ' .. #xs .. ' ' .. m.n .. ' ' .. #notes), out = out, notes = notes}
