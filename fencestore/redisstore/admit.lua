-- KEYS[1..N] mark keys; ARGV[1], ARGV[2], ARGV[3] token (canonical decimal uint64), mode ("ge" >=, "gt" >) and sequence ("" for none, else a canonical decimal uint64) of KEYS[1], the same triple for each further key, then optionally "w" to write an unchanged mark too, on admission and refusal alike (for WAIT); returns {flag, mark} per key, flattened: 1 admitted or 0 stale with the mark after the decision as stored ("token" or "token:sequence"), or -1 with an error text (a corrupt mark, a key of another type)
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
-- A mark is stored as the token in canonical decimal, then, when it has a
-- sequence, ':' and the sequence in canonical decimal ("42" or "42:7"); the
-- pair is compared token first, then sequence. Numbers are compared as
-- canonical decimal strings, by length then byte by byte: Lua numbers are
-- doubles, exact only up to 2^53, and Lua's < on strings follows the
-- locale's collation. A stored value of any other shape ("42:", "42:07",
-- "1:2:3") is a corrupt mark: an error reply for its key, never treated as
-- absent, so the proxy fails closed.

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

-- call runs a command with redis.pcall: its reply, or nil and the error text.
local function call(...)
  local r = redis.pcall(...)
  if type(r) == 'table' and r.err then
    return nil, r.err
  end
  return r
end

local n = #KEYS
if n < 1 or (#ARGV ~= 3 * n and #ARGV ~= 3 * n + 1) then
  return redis.error_reply('ERR fenceproxy: want a token, a mode and a sequence per key')
end
local w = ARGV[3 * n + 1]
if w ~= nil and w ~= 'w' then
  return redis.error_reply('ERR fenceproxy: the optional last argument must be w')
end
-- Every argument is checked before anything is written: a bad call writes
-- nothing.
for i = 1, n do
  local token, mode, seq = ARGV[3 * i - 2], ARGV[3 * i - 1], ARGV[3 * i]
  if type(token) ~= 'string' or not canonical(token) then
    return redis.error_reply('ERR fenceproxy: token is not a canonical decimal uint64')
  end
  if mode ~= 'ge' and mode ~= 'gt' then
    return redis.error_reply('ERR fenceproxy: mode must be ge or gt')
  end
  if type(seq) ~= 'string' or (seq ~= '' and not canonical(seq)) then
    return redis.error_reply('ERR fenceproxy: sequence is neither empty nor a canonical decimal uint64')
  end
end

local out = {}
for i = 1, n do
  local key, token, mode, seq = KEYS[i], ARGV[3 * i - 2], ARGV[3 * i - 1], ARGV[3 * i]
  -- pair is the mark this admission sets when admitted.
  local pair = token
  if seq ~= '' then
    pair = token .. ':' .. seq
  end
  -- result is the mark after the decision, and write, when set, the value
  -- the decision needs stored.
  local flag, result, write
  local mark, err = call('GET', key)
  if err then
    flag, result = -1, err
  elseif mark == false then
    flag, result, write = 1, pair, pair
  else
    local mt, ms = parse(mark)
    if mt == nil then
      flag, result = -1, 'corrupt mark'
    else
      local c = cmp(token, mt)
      if c > 0 or (c == 0 and seq ~= '' and (ms == nil or cmp(seq, ms) > 0)) then
        -- A greater token, or an equal one with a greater sequence (any
        -- sequence is above none): the mark becomes the admission's pair.
        flag, result, write = 1, pair, pair
      elseif c == 0 and seq == '' and mode == 'ge' then
        -- An equal token without a sequence under >=: the mark stays as it
        -- is, its sequence included.
        flag, result = 1, mark
      else
        flag, result = 0, mark
      end
      -- With WAIT an admission that changed nothing rewrites the mark it
      -- relied on, and a refusal the mark it reports: the acknowledgement
      -- then covers that mark too, so no decision stands on a mark a
      -- failover could still take back.
      if w == 'w' and write == nil then
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
