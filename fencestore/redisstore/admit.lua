-- KEYS[1..N] mark keys; ARGV[1], ARGV[2] token (canonical decimal uint64) and mode ("ge" >=, "gt" >) of KEYS[1], the same pair for each further key, then optionally "w" to write an unchanged mark too, on admission and refusal alike (for WAIT); returns {flag, mark} per key, flattened: 1 admitted or 0 stale with the mark as a decimal string, or -1 with an error text (a corrupt mark, a key of another type)
--
-- One call admits one key (the common case) or a batch of them (group commit:
-- one script run for many admissions). Keys are processed in order, each
-- seeing the marks the ones before it wrote, so a batch is the same as its
-- admissions run one after another. A corrupt mark fails that key only, and
-- so does a key of another type under the prefix (a hash, a list): a command
-- on it raises WRONGTYPE, and a raised error would abort the whole batch after
-- the keys before it had written their marks (a script is never rolled back),
-- so every per-key command goes through call, which returns the error instead.
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

-- call runs a command with redis.pcall: its reply, or nil and the error text.
local function call(...)
  local r = redis.pcall(...)
  if type(r) == 'table' and r.err then
    return nil, r.err
  end
  return r
end

local n = #KEYS
if n < 1 or (#ARGV ~= 2 * n and #ARGV ~= 2 * n + 1) then
  return redis.error_reply('ERR fenceproxy: want a token and a mode per key')
end
local w = ARGV[2 * n + 1]
if w ~= nil and w ~= 'w' then
  return redis.error_reply('ERR fenceproxy: the optional last argument must be w')
end
-- Every argument is checked before anything is written: a bad call writes
-- nothing.
for i = 1, n do
  local token, mode = ARGV[2 * i - 1], ARGV[2 * i]
  if type(token) ~= 'string' or not canonical(token) then
    return redis.error_reply('ERR fenceproxy: token is not a canonical decimal uint64')
  end
  if mode ~= 'ge' and mode ~= 'gt' then
    return redis.error_reply('ERR fenceproxy: mode must be ge or gt')
  end
end

local out = {}
for i = 1, n do
  local key, token, mode = KEYS[i], ARGV[2 * i - 1], ARGV[2 * i]
  -- write, when set, is the value the decision needs stored.
  local flag, result, write
  local mark, err = call('GET', key)
  if err then
    flag, result = -1, err
  elseif mark == false then
    flag, result, write = 1, token, token
  elseif not canonical(mark) then
    flag, result = -1, 'corrupt mark'
  else
    local c = cmp(token, mark)
    if c > 0 or (c == 0 and mode == 'ge') then
      flag, result = 1, token
      -- An equal token changes nothing, but with WAIT the write is what makes
      -- the replicas' acknowledgement cover the mark this admission relied on.
      if c > 0 or w == 'w' then
        write = token
      end
    else
      flag, result = 0, mark
      -- With WAIT a refusal rewrites the mark it reports, for the same reason:
      -- the acknowledgement then covers that mark too, so a refusal never
      -- reports a mark a failover could still take back.
      if w == 'w' then
        write = mark
      end
    end
  end
  if write then
    -- A refused SET (out of memory, an ACL) fails its own key: the decision
    -- would stand on a mark that was not written.
    local _, serr = call('SET', key, write)
    if serr then
      flag, result = -1, serr
    end
  end
  if flag == -1 then
    result = result .. ' at ' .. key
  end
  out[2 * i - 1], out[2 * i] = flag, result
end
return out
