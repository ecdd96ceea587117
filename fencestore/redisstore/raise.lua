-- KEYS[1] a mark key; ARGV[1] a mark as stored ("t" or "t:s", canonical decimals); returns {had, old, changed}: had 1 when the key held a mark (else 0), old that mark ("" for none), changed 1 when ARGV[1] was written: the key held no mark, or one ordered before ARGV[1] (else 0)
--
-- The operator's raise (fencestore.Keeper.Raise): a mark only moves forward,
-- atomically. Marks are compared as admit.lua compares them: token, then no
-- sequence before any sequence, then sequence, as canonical decimal strings
-- (by length, then byte by byte), never as Lua numbers. A corrupt mark or a
-- key of another type is an error and stays as it is: reset repairs it.
local MAX = '18446744073709551615'

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

local function before(at, as, bt, bs)
  local c = cmp(at, bt)
  if c ~= 0 then return c < 0 end
  if (as == nil) ~= (bs == nil) then return as == nil end
  return as ~= nil and cmp(as, bs) < 0
end

if #KEYS ~= 1 or #ARGV ~= 1 or type(ARGV[1]) ~= 'string' then
  return redis.error_reply('ERR fenceproxy: want a mark key and a mark')
end
local nt, ns = parse(ARGV[1])
if nt == nil then
  return redis.error_reply('ERR fenceproxy: the mark is not a canonical token[:sequence]')
end
local old = redis.call('GET', KEYS[1])
if old == false then
  redis.call('SET', KEYS[1], ARGV[1])
  return {0, '', 1}
end
local ot, oseq = parse(old)
if ot == nil then
  return redis.error_reply('ERR fenceproxy: corrupt mark at ' .. KEYS[1])
end
if before(ot, oseq, nt, ns) then
  redis.call('SET', KEYS[1], ARGV[1])
  return {1, old, 1}
end
return {1, old, 0}
