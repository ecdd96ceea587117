-- KEYS[1] a mark key; ARGV[1] the mark to set, as stored ("t" or "t:s", canonical decimals), or "" to delete the key; returns {had, old}: had 1 when the key existed (else 0), old its value ("" for none, and for a key of another type than a string)
--
-- The operator's reset (fencestore.Keeper.Reset): the mark is set or
-- deleted whatever it was, atomically with reading the old one. A corrupt
-- old value, or a key of another type, is replaced too: that is how an
-- operator repairs it.
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

local function mark(v)
  local i = string.find(v, ':', 1, true)
  if i == nil then return canonical(v) end
  return canonical(string.sub(v, 1, i - 1)) and canonical(string.sub(v, i + 1))
end

if #KEYS ~= 1 or #ARGV ~= 1 or type(ARGV[1]) ~= 'string' then
  return redis.error_reply('ERR fenceproxy: want a mark key and a mark or ""')
end
if ARGV[1] ~= '' and not mark(ARGV[1]) then
  return redis.error_reply('ERR fenceproxy: the mark is neither empty nor a canonical token[:sequence]')
end
-- GET raises WRONGTYPE on a key of another type: pcall takes it as "there
-- was something", whose value is no mark.
local had, old = 1, redis.pcall('GET', KEYS[1])
if old == false then
  had, old = 0, ''
elseif type(old) ~= 'string' then
  old = ''
end
if ARGV[1] == '' then
  redis.call('DEL', KEYS[1])
else
  redis.call('SET', KEYS[1], ARGV[1])
end
return {had, old}
