-- KEYS[1] mark key; ARGV[1] token (canonical decimal uint64), ARGV[2] "ge" (>=) or "gt" (>), ARGV[3] "w" to write an unchanged mark too (for WAIT); returns {1|0 admitted, mark as decimal string}
--
-- Numbers are compared as canonical decimal strings, by length then byte by
-- byte: Lua numbers are doubles, exact only up to 2^53, and Lua's < on strings
-- follows the locale's collation. A mark that is not a canonical decimal is an
-- error reply, never treated as absent, so the proxy fails closed.

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

local key, token, mode, w = KEYS[1], ARGV[1], ARGV[2], ARGV[3]
if type(token) ~= 'string' or not canonical(token) then
  return redis.error_reply('ERR fenceproxy: token is not a canonical decimal uint64')
end
if mode ~= 'ge' and mode ~= 'gt' then
  return redis.error_reply('ERR fenceproxy: mode must be ge or gt')
end

local mark = redis.call('GET', key)
if mark == false then
  redis.call('SET', key, token)
  return {1, token}
end
if not canonical(mark) then
  return redis.error_reply('ERR fenceproxy: corrupt mark at ' .. key)
end
local c = cmp(token, mark)
if c > 0 or (c == 0 and mode == 'ge') then
  -- An equal token changes nothing, but with WAIT the write is what makes
  -- the replicas' acknowledgement cover the mark this admission relied on.
  if c > 0 or w == 'w' then
    redis.call('SET', key, token)
  end
  return {1, token}
end
return {0, mark}
