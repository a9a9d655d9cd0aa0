-- The sandbox's Lua side, run once per state before the script (see sandbox.rs). It receives
-- the Rust helpers in H, wraps the globals that could swallow a sandbox error, print an
-- address, hang in C or reach the garbage collector, installs the cairn globals, and makes the
-- libraries, `args` and `budget` read-only. Nothing it defines is reachable by name.
local H = ...
local PRIVATE = H.private
local raw_error, raw_type, raw_select, raw_tostring = error, type, select, tostring
local raw_pcall, raw_xpcall = pcall, xpcall
local raw_getmetatable, raw_setmetatable = getmetatable, setmetatable
local raw_rawget, raw_rawset, raw_rawlen, raw_next = rawget, rawset, rawlen, next
local raw_find, raw_rep, raw_format = string.find, string.rep, string.format
local raw_unpack, tointeger = table.unpack, math.tointeger
local fatal, note, depth, limit = H.fatal, H.note, H.depth, H.limit
local G = _G

-- What an internal table is: nil for a plain table; "array"/"object" for a table that came
-- from JSON; the backing table of a read-only view; a name for other internal tables.
local function internal_kind(t)
  local mt = raw_getmetatable(t)
  if raw_type(mt) == "table" then return raw_rawget(mt, PRIVATE) end
  return nil
end

local function is_view(t)
  local kind = internal_kind(t)
  return kind ~= nil and kind ~= "array" and kind ~= "object" and kind ~= "metaguard"
end

-- Errors: a sandbox limit, a cancellation or an uncatchable engine error is re-raised by every
-- construct that catches errors.
local function check(ok, ...)
  if not ok then fatal((...)) end
  return ok, ...
end

pcall = function(f, ...) return check(raw_pcall(f, ...)) end
xpcall = function(f, handler, ...)
  return check(raw_xpcall(f, function(e) note(e) return handler(e) end, ...))
end

-- Coroutines the script creates: errors inside them are checked like pcall's; the cairn
-- globals are refused inside them (they would yield to the script instead of the engine).
local co = coroutine
local raw_create, raw_resume, raw_yield, raw_close = co.create, co.resume, co.yield, co.close
local raw_isyieldable, raw_status = co.isyieldable, co.status
local created = raw_setmetatable({}, { __mode = "k" })

local function own(c, what)
  if raw_type(c) ~= "thread" or not created[c] then
    raw_error("bad argument #1 to '" .. what .. "' (a coroutine made by coroutine.create or coroutine.wrap expected)", 3)
  end
end

local function left(...)
  depth(-1)
  return check(...)
end

co.create = function(f)
  if raw_type(f) ~= "function" then raw_error("bad argument #1 to 'create' (function expected)", 2) end
  local c = raw_create(f)
  created[c] = true
  return c
end
co.resume = function(c, ...)
  own(c, "resume")
  depth(1)
  return left(raw_resume(c, ...))
end
co.close = function(c)
  own(c, "close")
  return check(raw_close(c))
end
co.status = function(c)
  own(c, "status")
  return raw_status(c)
end
co.yield = function(...)
  if depth(0) == 0 then raw_error("coroutine.yield outside a coroutine the script created", 2) end
  return raw_yield(...)
end
co.isyieldable = function() return depth(0) > 0 and raw_isyieldable() end
co.running = function() raw_error("coroutine.running is not available in the sandbox", 2) end
co.wrap = function(f)
  local c = co.create(f)
  local function finish(ok, ...)
    if ok then return ... end
    raw_error((...), 0)
  end
  return function(...) return finish(co.resume(c, ...)) end
end

-- Metatables: internal ones are hidden and fixed; finalizers, to-be-closed values and weak
-- tables are refused (they would make a run depend on the garbage collector).
local FORBIDDEN = { __gc = true, __close = true, __mode = true }
local function forbidden_event(name)
  raw_error(name .. " is not available in the sandbox: finalizers, to-be-closed values and weak tables " ..
    "make a run depend on the garbage collector", 3)
end
local METAGUARD = {
  [PRIVATE] = "metaguard",
  __newindex = function(m, k, v)
    if FORBIDDEN[k] then forbidden_event(k) end
    raw_rawset(m, k, v)
  end,
}

getmetatable = function(x)
  local mt = raw_getmetatable(x)
  if raw_type(mt) == "table" and raw_rawget(mt, PRIVATE) ~= nil then return nil end
  return mt
end
setmetatable = function(t, mt)
  if raw_type(t) == "table" then
    local kind = internal_kind(t)
    if kind ~= nil and kind ~= "array" and kind ~= "object" then
      raw_error("cannot change the metatable of a read-only table", 2)
    end
  end
  if raw_type(mt) == "table" then
    for name in raw_next, FORBIDDEN do
      if raw_rawget(mt, name) ~= nil then forbidden_event(name) end
    end
    if raw_getmetatable(mt) == nil then raw_setmetatable(mt, METAGUARD) end
  end
  return raw_setmetatable(t, mt)
end
rawset = function(t, k, v)
  if raw_type(t) == "table" then
    local kind = internal_kind(t)
    if kind == "metaguard" and FORBIDDEN[k] then forbidden_event(k) end
    if is_view(t) then t[k] = v return t end
  end
  return raw_rawset(t, k, v)
end
rawget = function(t, k)
  if raw_type(t) == "table" and is_view(t) then return t[k] end
  return raw_rawget(t, k)
end
rawlen = function(t)
  if raw_type(t) == "table" and is_view(t) then return #t end
  return raw_rawlen(t)
end

-- Text: no addresses (they differ from run to run).
tostring = function(v)
  local t = raw_type(v)
  local text = raw_tostring(v)
  if t == "table" or t == "function" or t == "thread" or t == "userdata" then
    if raw_type(text) ~= "string" or raw_find(text, ": 0x%x+$") or raw_find(text, ": %x+$") or raw_find(text, "^builtin: ") then
      return "<" .. t .. ">"
    end
  end
  return text
end
-- A string buffer (`string.rep`, `string.format`, `table.concat`) grows through the allocator
-- directly (Lua's lauxlib), with no emergency collection as the core's allocations have: the
-- garbage the collector has not reached yet counted against the memory limit there, so a
-- script whose live memory stays under its limit ended with "not enough memory". On that error
-- the state collects garbage and the builtin runs again, as the core does for its own. Any
-- other error is raised again as it was (the builtin is not run twice: a table's __index may
-- have called the engine).
local collect = H.collect
local function buffered(f, ...)
  local ok, result = raw_pcall(f, ...)
  if ok then return result end
  if result ~= "not enough memory" then raw_error(result, 0) end
  collect()
  return f(...)
end

-- Builtins that walk a string without allocating charge the bytes they walk to the operation
-- budget (`H.scanned`; Rhai's twins are in rhai/scan.rs): one `utf8.len` or `tonumber` of
-- 4 MB in a loop was a hang the instruction count never saw. `pass` keeps their results and,
-- as each is called through a local of its own name, their errors name them as before.
local scanned = H.scanned
local function pass(...) return ... end
local function bytes_of(v) if raw_type(v) == "string" then return #v end return 0 end
-- The bytes between positions i and j of s (Lua's relative positions, j defaulting to d).
local function span(s, i, j, d)
  if raw_type(s) ~= "string" then return 0 end
  local n = #s
  i, j = tointeger(i) or 1, tointeger(j) or d
  if i < 0 then i = n + i + 1 end
  if j < 0 then j = n + j + 1 end
  if i < 1 then i = 1 end
  if j > n then j = n end
  if j < i then return 0 end
  return j - i + 1
end
do
  local len, offset, codepoint = utf8.len, utf8.offset, utf8.codepoint
  utf8.len = function(s, i, j, ...) scanned(span(s, i, j, -1)) return pass(len(s, i, j, ...)) end
  utf8.codepoint = function(s, i, ...)
    scanned(span(s, i, (...), tointeger(i) or 1))
    return pass(codepoint(s, i, ...))
  end
  utf8.offset = function(s, n, ...)
    local walk = tointeger(n) or 0
    if walk < 0 then walk = -walk end
    local most = bytes_of(s)
    if 4 * (walk + 1) < most then most = 4 * (walk + 1) end
    scanned(most)
    return pass(offset(s, n, ...))
  end
  local pack, packsize, unpack = string.pack, string.packsize, string.unpack
  string.pack = function(fmt, ...) scanned(bytes_of(fmt)) return pass(pack(fmt, ...)) end
  string.packsize = function(fmt, ...) scanned(bytes_of(fmt)) return pass(packsize(fmt, ...)) end
  string.unpack = function(fmt, s, ...)
    -- `z` reads up to a zero byte: it may walk the rest of the subject.
    local walked = bytes_of(fmt)
    if raw_type(fmt) == "string" and raw_find(fmt, "z", 1, true) then walked = walked + bytes_of(s) end
    scanned(walked)
    return pass(unpack(fmt, s, ...))
  end
  local tonumber = tonumber
  G.tonumber = function(v, ...)
    if raw_type(v) == "string" then scanned(#v) end
    return pass(tonumber(v, ...))
  end
  -- Builtins that make or take many values in one call: `table.unpack(t, 1, 900000)` or
  -- `string.byte(s, 1, 900000)` pushes 900,000 values in one instruction, in a loop a hang the
  -- budget never saw. Each value is charged as a 16-byte slot copied; an absent end of
  -- `unpack` is read with rawlen (a __len is not run twice).
  local VALUE = 16
  local unpack, byte, char, uchar = table.unpack, string.byte, string.char, utf8.char
  table.unpack = function(t, i, j, ...)
    local last = tointeger(j)
    if last == nil and j == nil and raw_type(t) == "table" then last = raw_rawlen(t) end
    local count = (last or 0) - (tointeger(i) or 1) + 1
    if count > 0 then scanned(VALUE * count) end
    return pass(unpack(t, i, j, ...))
  end
  string.byte = function(s, i, ...)
    scanned(VALUE * span(s, i, (...), tointeger(i) or 1))
    return pass(byte(s, i, ...))
  end
  string.char = function(...) scanned(VALUE * raw_select("#", ...)) return (char(...)) end
  utf8.char = function(...) scanned(VALUE * raw_select("#", ...)) return (uchar(...)) end
end

string.format = function(fmt, ...)
  if raw_type(fmt) == "string" and raw_find(fmt, "%%[-+ #0]*%d*%.?%d*p") then
    raw_error("bad argument #1 to 'format' (%p prints an address, which differs from run to run)", 2)
  end
  local n = raw_select("#", ...)
  local args = { ... }
  for i = 1, n do
    local t = raw_type(args[i])
    if t == "table" or t == "function" or t == "thread" or t == "userdata" then args[i] = tostring(args[i]) end
  end
  return buffered(raw_format, fmt, raw_unpack(args, 1, n))
end
-- A gsub whose replacement raised returns the raised value (see pattern.rs): raise it here,
-- from Lua, so it reaches the script as it was raised.
local rust_gsub = string.gsub
string.gsub = function(...)
  local result, count, raised, e = rust_gsub(...)
  if raised then raw_error(e, 0) end
  return result, count
end
local MAX_STRING = H.max_string
string.rep = function(s, n, sep)
  if raw_type(s) == "number" then s = raw_tostring(s) end
  if raw_type(sep) == "number" then sep = raw_tostring(sep) end
  local count = tointeger(n)
  if raw_type(s) == "string" and count and count > 0 and (sep == nil or raw_type(sep) == "string") then
    local unit = #s + (sep and #sep or 0)
    if unit == 0 then return "" end
    if unit * (count + 0.0) > MAX_STRING then
      limit("string.rep would build a string of about " .. raw_format("%.0f", unit * (count + 0.0)) ..
        " bytes, over the sandbox's limit of " .. MAX_STRING .. " bytes")
    end
  end
  return buffered(raw_rep, s, n, sep)
end


-- The table library's loops written in Lua, so the instruction budget counts them (a huge
-- length from __len cannot spin in C), and a stable merge sort, so equal elements keep their
-- order on every run (Lua's own sort randomizes its pivot); a comparator the result shows is
-- not a total order is an error, as in Rhai.
local tbl = table
local function check_table(t, i, what)
  if raw_type(t) ~= "table" then
    raw_error("bad argument #" .. i .. " to '" .. what .. "' (table expected, got " .. raw_type(t) .. ")", 3)
  end
end
local function integer_arg(v, i, what)
  local n = tointeger(v)
  if n == nil then raw_error("bad argument #" .. i .. " to '" .. what .. "' (number has no integer representation)", 3) end
  return n
end
do
  -- Called by its own name (not a tail call), so its errors still name 'concat'.
  local concat = tbl.concat
  local function call(...) return (concat(...)) end
  tbl.concat = function(...) return buffered(call, ...) end
end
tbl.insert = function(t, ...)
  check_table(t, 1, "insert")
  local count = raw_select("#", ...)
  local e = #t + 1
  if count == 1 then
    t[e] = ...
    return
  end
  if count ~= 2 then raw_error("wrong number of arguments to 'insert'", 2) end
  local pos, v = ...
  pos = integer_arg(pos, 2, "insert")
  if pos < 1 or pos > e then raw_error("bad argument #2 to 'insert' (position out of bounds)", 2) end
  for i = e, pos + 1, -1 do t[i] = t[i - 1] end
  t[pos] = v
end
tbl.remove = function(t, pos)
  check_table(t, 1, "remove")
  local size = #t
  if pos == nil then pos = size else pos = integer_arg(pos, 2, "remove") end
  if pos ~= size and (pos < 1 or pos > size + 1) then
    raw_error("bad argument #2 to 'remove' (position out of bounds)", 2)
  end
  local v = t[pos]
  while pos < size do
    t[pos] = t[pos + 1]
    pos = pos + 1
  end
  t[pos] = nil
  return v
end
tbl.move = function(a1, f, e, t, a2)
  check_table(a1, 1, "move")
  f, e, t = integer_arg(f, 2, "move"), integer_arg(e, 3, "move"), integer_arg(t, 4, "move")
  if a2 == nil then a2 = a1 end
  check_table(a2, 5, "move")
  if e >= f then
    if t > e or t <= f or a1 ~= a2 then
      for i = 0, e - f do a2[t + i] = a1[f + i] end
    else
      for i = e - f, 0, -1 do a2[t + i] = a1[f + i] end
    end
  end
  return a2
end
local function less(a, b) return a < b end
tbl.sort = function(t, comp)
  check_table(t, 1, "sort")
  if comp ~= nil and raw_type(comp) ~= "function" then raw_error("bad argument #2 to 'sort' (function expected)", 2) end
  comp = comp or less
  local n = #t
  if n < 2 then return end
  local a, b = {}, {}
  for i = 1, n do a[i] = t[i] end
  local width = 1
  while width < n do
    local i = 1
    while i <= n do
      local mid, hi = i + width - 1, i + 2 * width - 1
      if mid > n then mid = n end
      if hi > n then hi = n end
      local l, r, k = i, mid + 1, i
      while l <= mid and r <= hi do
        if comp(a[r], a[l]) then b[k] = a[r]; r = r + 1 else b[k] = a[l]; l = l + 1 end
        k = k + 1
      end
      while l <= mid do b[k] = a[l]; l = l + 1; k = k + 1 end
      while r <= hi do b[k] = a[r]; r = r + 1; k = k + 1 end
      i = i + 2 * width
    end
    a, b = b, a
    width = width * 2
  end
  for i = 1, n do t[i] = a[i] end
  -- A total order leaves no adjacent pair out of order; a comparator that contradicts itself
  -- usually does, and is an error rather than an order that depends on the algorithm.
  for i = 2, n do
    if comp(a[i], a[i - 1]) then
      raw_error("the sort comparator is not a total order (it put an element both before and after another); compare consistently, e.g. function(x, y) return x < y end", 2)
    end
  end
end

-- Read-only views (the libraries, `args`, `budget`).
local function freeze(t, what)
  local mt = {
    __index = t,
    __newindex = function() raw_error(what .. " is read-only; copy what you need into a table of your own", 2) end,
    __len = function() return raw_rawlen(t) end,
  }
  mt[PRIVATE] = t
  return raw_setmetatable({}, mt)
end
local function deep_freeze(t, what)
  for k, v in raw_next, t do
    if raw_type(v) == "table" then raw_rawset(t, k, deep_freeze(v, what)) end
  end
  return freeze(t, what)
end

-- The cairn globals: each raw function returns true and its values, or false and a catchable
-- error (an uncatchable one is raised from Rust).
local function unwrap(ok, ...)
  if ok then return ... end
  raw_error((...), 0)
end
for name, raw in raw_next, H.globals do
  G[name] = function(...) return unwrap(raw(...)) end
end
local spent, remaining = H.spent, H.remaining
local BUDGET = freeze({
  spent = function() return unwrap(spent()) end,
  remaining = function() return unwrap(remaining()) end,
}, "budget")
local ARGS = H.args
if raw_type(ARGS) == "table" then ARGS = deep_freeze(ARGS, "args") end

for _, name in raw_next, { "string", "table", "math", "utf8", "coroutine" } do
  G[name] = freeze(G[name], name)
end
local string_mt = raw_getmetatable("")
string_mt[PRIVATE] = "string"
-- A string's arithmetic converts it to a number first, a walk of the whole string: charged.
for _, event in raw_next, { "__add", "__sub", "__mul", "__div", "__mod", "__pow", "__unm", "__idiv" } do
  local arith = string_mt[event]
  string_mt[event] = function(a, b) scanned(bytes_of(a) + bytes_of(b)) return pass(arith(a, b)) end
end

next = H.next
-- A table's own __pairs is called from Lua, not from Rust (see internals.rs: its errors keep
-- their value and it may call the cairn globals): the Rust pairs hands it back marked.
local rust_pairs, raw_rawequal = H.pairs, rawequal
pairs = function(t)
  local f, s, c = rust_pairs(t)
  if raw_rawequal(s, PRIVATE) then
    local a, b, d = f(c)
    return a, b, d
  end
  return f, s, c
end

local READ_ONLY = { args = true, budget = true }
raw_setmetatable(G, {
  [PRIVATE] = "globals",
  __index = { args = ARGS, budget = BUDGET },
  __newindex = function(t, k, v)
    if READ_ONLY[k] then raw_error("'" .. k .. "' is read-only; copy what you need into a local first", 2) end
    raw_rawset(t, k, v)
  end,
})
