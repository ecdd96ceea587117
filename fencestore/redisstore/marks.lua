-- marks.lua: the helpers every fenceproxy script shares. It is not a script
-- of its own: the Go side puts it in front of each script it loads (Redis
-- runs a script as one chunk and has no import), so admit.lua, raise.lua,
-- reset.lua and release.lua compare and parse marks with one definition.
--
-- Numbers are compared as canonical decimal strings, by length then byte by
-- byte: Lua numbers are doubles, exact only up to 2^53, and Lua's < on
-- strings follows the locale's collation.
local MAX = '18446744073709551615'

-- cmp returns -1, 0 or 1 as canonical decimal a is below, equal to or above b.
local function cmp(a, b)
  if #a ~= #b then
    if #a < #b then return -1 end
    return 1
  end
  for i = 1, #a do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then
      if x < y then return -1 end
      return 1
    end
  end
  return 0
end

-- canonical reports whether s is a decimal uint64 written canonically: 1 to 20
-- digits, no sign, no leading zero unless s is "0", at most MAX.
local function canonical(s)
  local n = #s
  if n < 1 or n > 20 then return false end
  for i = 1, n do
    local c = string.byte(s, i)
    if c < 48 or c > 57 then return false end
  end
  if n > 1 and string.byte(s, 1) == 48 then return false end
  return n < 20 or cmp(s, MAX) <= 0
end

-- parse splits a stored mark into its token and sequence (nil when it has
-- none), or returns nil when the value is not a mark.
local function parse(v)
  local i = string.find(v, ':', 1, true)
  if i == nil then
    if canonical(v) then return v end
    return nil
  end
  local t, s = string.sub(v, 1, i - 1), string.sub(v, i + 1)
  if canonical(t) and canonical(s) then return t, s end
  return nil
end

-- before reports whether the mark (at, as) is ordered before (bt, bs), the
-- sequences nil for none: a lower token, or an equal token and no sequence
-- before any, or a lower sequence (fencestore.Mark.Before).
local function before(at, as, bt, bs)
  local c = cmp(at, bt)
  if c ~= 0 then return c < 0 end
  if (as == nil) ~= (bs == nil) then return as == nil end
  return as ~= nil and cmp(as, bs) < 0
end

-- call runs a command with redis.pcall: its reply, or nil and the error text.
local function call(...)
  local r = redis.pcall(...)
  if type(r) == 'table' and r.err then
    return nil, r.err
  end
  return r
end

