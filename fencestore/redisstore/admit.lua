-- KEYS[1], KEYS[2] mark key and in-flight key of the first admission, the same pair for each further one, then optionally the identity key, or the identity key and the generation key; ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5] token (canonical decimal uint64), mode ("ge" >=, "gt" >), sequence ("" for none, else a canonical decimal uint64), barrier ("" for none, else "<bound_ms> <id>", or "<bound_ms>+ <id>" when the caller has requests of the resource in flight itself) and floor ("" for none, else a mark as stored, "t" or "t:s", then "@" and the generation it was seen at) of the first admission, the same five for each further one, then optionally "w" to write an unchanged mark too, on admission and refusal alike (for WAIT), then, when the identity key is given, the identity expected there, and with the generation key the greatest generation the caller has seen there; returns {flag, mark, member, older, olders, regressed, generation} per admission, flattened: flag 1 admitted or 0 stale with the mark after the decision as stored ("token" or "token:sequence"), -1 with an error text (a corrupt mark, a key of another type), or -2 with the identity the identity key holds ("" for none) when it is not the one expected, or -3 with the generation the store holds when it is below the one the caller has seen (then for every admission, and nothing is written); member is the in-flight entry an admission with a barrier made ("" for none), older 1 when an entry ordered before it is in flight (else 0; 2 when more of them are than olders lists), olders those entries (the oldest 256 by order) (their members, separated by spaces; "" for none), regressed 1 when the stored mark was absent or below the floor, so that the decision was taken against the floor and the mark written back, 2 when the floor was set aside because an operator changed marks after its generation (else 0), generation the store's generation after the run ("0" without the generation key); optionally the releases riding the run come before all that: KEYS[1..r] their in-flight keys, and ARGV[1] "r", ARGV[2] r, ARGV[3] the channel to announce on, ARGV[4..3+r] their members (as release.lua takes them), the keys and arguments above then following
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
--
-- The drain barrier (doc.go). An admitted request with a barrier enters the
-- in-flight key beside its mark (flight.lua has the members' form). The
-- entries ordered before a request are those below its order
-- (ZRANGEBYLEX), and an equal order, a prefix of the member, is never below
-- it: equal orders never wait. The reply lists them, in one string (one
-- bulk reply, not one per entry): they are what the request waits for (its
-- snapshot), and nothing admitted after it. No clock of the server's
-- decides anything here: a waiter times an older entry by its own
-- monotonic clock (flight.go). The entry goes in before the mark is
-- written, so a failed entry leaves the mark as it was. An admission
-- without a barrier does not touch its in-flight key: the caller passes the
-- mark key again in its place, which keeps a Cluster call within one slot
-- whatever the mark key's name.
--
-- Releases may ride the run (group commit on a single server: one script
-- run instead of two, batch.go): they go first, as release.lua would run
-- them just before, whatever the admissions then find (a lost identity, a
-- bad mark), so that an admission never finds an entry released before it
-- was sent. The keys of a run touch many slots then, which only a server
-- that is not a Cluster allows.
--
-- The floor (fencestore.Admission.Floor): the greatest mark the replica saw
-- for the resource. A stored mark ordered before it (token, then no
-- sequence before any sequence, then sequence), or none, has regressed: the
-- admission is decided against the floor instead, and the mark after the
-- decision (at least the floor) is written back in this same run, so the
-- store heals in the step that found the loss.
--
-- The identity (fencestore.Keeper): with an odd number of keys the last is
-- the store's identity key and the last argument the identity expected
-- there. It is read once per run, after the arguments are checked and
-- before anything is written; when it does not hold the expected identity
-- (none, another one), every admission of the run answers -2 with what it
-- holds, and nothing is written: the store was emptied or replaced.
--
-- The generation (fencestore/generation.go): with an even number of keys
-- and two arguments more than the admissions take, the last two keys are
-- the identity key and the generation key (a hash: g the generation, op the
-- generation of the operator's last change of marks, both 0 when absent),
-- and the last two arguments the identity expected and the greatest
-- generation the caller has seen. A store whose g is below it went back in
-- time: every admission answers -3 with g, and nothing is written. A run
-- that writes a mark advances g by one (HINCRBY), in the same run; a floor
-- seen at a generation below op is set aside (regressed 2).
-- The releases riding the run, when the arguments begin with "r": KEYS
-- and ARGV then hold the admissions' keys and arguments from ko + 1 and
-- ao + 1 on (offsets, not copies: a copy of every argument of the run
-- cost Redis as much as an admission's own arguments).
local KEYS, ARGV = KEYS, ARGV
local ko, ao, nrel, channel = 0, 0, 0, nil
if ARGV[1] == 'r' then
  local r = tonumber(ARGV[2])
  if type(ARGV[2]) ~= 'string' or not canonical(ARGV[2]) or r < 1 or r > #KEYS or #ARGV < r + 3 then
    return redis.error_reply('ERR fenceproxy: releases want "r", their number, the channel, and a member each')
  end
  channel, nrel, ko, ao = ARGV[3], r, r, r + 3
end

local nkeys, nargs = #KEYS - ko, #ARGV - ao
local idkey, want, genkey, seen
if nkeys % 2 == 1 then
  idkey, want = KEYS[ko + nkeys], ARGV[ao + nargs]
  nkeys, nargs = nkeys - 1, nargs - 1
elseif nkeys >= 4 and (nargs - 2) % 5 <= 1 and math.floor((nargs - 2) / 5) == nkeys / 2 - 1 then
  idkey, genkey, want, seen = KEYS[ko + nkeys - 1], KEYS[ko + nkeys], ARGV[ao + nargs - 1], ARGV[ao + nargs]
  nkeys, nargs = nkeys - 2, nargs - 2
  if type(seen) ~= 'string' or not canonical(seen) then
    return redis.error_reply('ERR fenceproxy: the generation seen is not a canonical decimal')
  end
end
local n = nkeys / 2
if n < 1 or (nargs ~= 5 * n and nargs ~= 5 * n + 1) then
  return redis.error_reply('ERR fenceproxy: want a mark key and an in-flight key, and a token, a mode, a sequence, a barrier and a floor, per admission')
end
if idkey ~= nil and (type(want) ~= 'string' or want == '') then
  return redis.error_reply('ERR fenceproxy: an identity key wants the identity expected, last')
end
local w
if nargs == 5 * n + 1 then
  w = ARGV[ao + nargs]
  if w ~= 'w' then
    return redis.error_reply('ERR fenceproxy: the optional argument after the admissions must be w')
  end
end
-- Every argument is checked before anything is written: a bad call writes
-- nothing.
local bounds, ids, busy, floors = {}, {}, {}, {}
for i = 1, n do
  local a = ao + 5 * i
  local token, mode, seq, fl, floor = ARGV[a - 4], ARGV[a - 3], ARGV[a - 2], ARGV[a - 1], ARGV[a]
  if type(token) ~= 'string' or not canonical(token) then
    return redis.error_reply('ERR fenceproxy: token is not a canonical decimal uint64')
  end
  if mode ~= 'ge' and mode ~= 'gt' then
    return redis.error_reply('ERR fenceproxy: mode must be ge or gt')
  end
  if type(seq) ~= 'string' or (seq ~= '' and not canonical(seq)) then
    return redis.error_reply('ERR fenceproxy: sequence is neither empty nor a canonical decimal uint64')
  end
  if fl ~= '' then
    -- At most 12 digits: the member's bound field, and exact as a double.
    -- A '+' after the bound: the caller has requests of the resource in
    -- flight itself (flight.lua's enter looks first).
    local t, b, id = string.match(fl, '^([1-9][0-9]*)(%+?) ([0-9A-Za-z]+)$')
    if t == nil or #t > 12 or #id > 64 then
      return redis.error_reply('ERR fenceproxy: barrier is neither empty nor "<bound_ms>[+] <id>"')
    end
    bounds[i], ids[i], busy[i] = t, id, b == '+'

  end
  if type(floor) ~= 'string' then
    return redis.error_reply('ERR fenceproxy: floor is neither empty nor a mark')
  end
  if floor ~= '' then
    local fm, fg = string.match(floor, '^([^@]*)@(.*)$')
    if fm == nil then
      fm, fg = floor, '0'
    end
    local ft, fs = parse(fm)
    if ft == nil or not canonical(fg) then
      return redis.error_reply('ERR fenceproxy: floor is neither empty nor a mark')
    end
    floors[i] = {ft, fs, fm, fg}
  end
end

-- flagged[i]: a later admission of the run with a barrier enters the same
-- in-flight key, so that it finds admission i's entry in flight (when it
-- is ordered after it, as it is unless of an equal order): the entry is
-- flagged as it goes in (flight.lua's enter), in the same command.
local flagged, last = {}, {}
for i = n, 1, -1 do
  if bounds[i] then
    local fkey = KEYS[ko + 2 * i]
    flagged[i] = last[fkey] ~= nil
    last[fkey] = i
  end
end

-- The releases, ahead of every admission of the run.
for i = 1, nrel do
  release(KEYS[i], ARGV[3 + i], channel)
end

local out = {}
-- failAll answers every admission of the run with flag and result, and
-- nothing else: the run stops before anything is written.
local function failAll(flag, result)
  for i = 1, n do
    local b = 7 * (i - 1)
    out[b + 1], out[b + 2], out[b + 3], out[b + 4], out[b + 5], out[b + 6], out[b + 7] = flag, result, '', 0, '', 0, '0'
  end
  return out
end
-- The identity, once for the whole run, before anything is written.
if idkey ~= nil then
  local found, err = call('GET', idkey)
  if err or found ~= want then
    local flag, result = -2, found
    if err then
      flag, result = -1, 'identity key: ' .. err .. ' at ' .. idkey
    elseif found == false then
      result = ''
    end
    return failAll(flag, result)
  end
end
-- The generation, read with the identity, before anything is written.
local gen, op = '0', '0'
if genkey ~= nil then
  local g, err = call('HMGET', genkey, 'g', 'op')
  local flag, result
  if err then
    flag, result = -1, 'generation key: ' .. err .. ' at ' .. genkey
  else
    gen, op = g[1] or '0', g[2] or '0'
    if not canonical(gen) or not canonical(op) then
      flag, result = -1, 'corrupt generation at ' .. genkey
    elseif cmp(seen, gen) > 0 then
      flag, result = -3, gen
    end
  end
  if flag ~= nil then
    return failAll(flag, result)
  end
  -- A floor seen before the operator's last change of marks is set
  -- aside: the operator's word stands over what a replica remembers.
  for i = 1, n do
    local f = floors[i]
    if f ~= nil and op ~= '0' and cmp(f[4], op) < 0 then
      floors[i] = false
    end
  end
end
local wrote = false

for i = 1, n do
  local key, fkey = KEYS[ko + 2 * i - 1], KEYS[ko + 2 * i]
  local a = ao + 5 * i
  local token, mode, seq = ARGV[a - 4], ARGV[a - 3], ARGV[a - 2]
  -- pair is the mark this admission sets when admitted.
  local pair = token
  if seq ~= '' then
    pair = token .. ':' .. seq
  end
  -- result is the mark after the decision, and write, when set, the value
  -- the decision needs stored.
  local flag, result, write
  local regressed = 0
  local mark, err = call('GET', key)
  local mt, ms
  if not err and mark ~= false then
    mt, ms = parse(mark)
    if mt == nil then
      err = 'corrupt mark'
    end
  end
  if err then
    flag, result = -1, err
  else
    -- A floor above the stored mark, or a floor and no mark: the mark
    -- regressed, and the floor stands in for it.
    local f = floors[i]
    if f == false then
      regressed = 2
    elseif f ~= nil and (mark == false or before(mt, ms, f[1], f[2])) then
      regressed = 1
      mark, mt, ms = f[3], f[1], f[2]
    end
    if mark == false then
      flag, result, write = 1, pair, pair
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
      -- A regressed mark is healed: the mark after the decision (the
      -- floor, when the decision did not move it) is written back.
      -- With WAIT an admission that changed nothing rewrites the mark it
      -- relied on, and a refusal the mark it reports: the acknowledgement
      -- then covers that mark too, so no decision stands on a mark a
      -- failover could still take back.
      if (regressed == 1 or w == 'w') and write == nil then
        write = mark
      end
    end
  end
  -- The in-flight entry goes in before the mark is written: an admission
  -- whose entry fails (the in-flight key of another type, out of memory)
  -- fails as a whole and leaves the mark as it was.
  local member, olders, more = '', EMPTY, false
  if flag == 1 and bounds[i] then
    local m, ol, mo, ferr = enter(fkey, token, seq, bounds[i], ids[i], flagged[i], busy[i])
    if ferr then
      flag, result, write = -1, ferr, nil
      key = fkey
    else
      member, olders, more = m, ol, mo
    end
  end
  if write then
    -- A refused SET (out of memory, an ACL) fails its own key: the decision
    -- would stand on a mark that was not written.
    local _, serr = call('SET', key, write)
    if serr then
      flag, result = -1, serr
      if member ~= '' then
        forget(fkey, member)
        member, olders, more = '', EMPTY, false
      end
    else
      wrote = true
    end
  end
  if flag == -1 then
    result = result .. ' at ' .. key
    regressed = 0
  end
  local o = 0
  if more then
    o = 2
  elseif #olders > 0 then
    o = 1
  end
  if #olders > 0 then
    olders = table.concat(olders, ' ')
  else
    olders = ''
  end
  local b = 7 * (i - 1)
  out[b + 1], out[b + 2], out[b + 3], out[b + 4], out[b + 5], out[b + 6] = flag, result, member, o, olders, regressed
end
-- Every mark written advances the generation, in this same run.
if genkey ~= nil and wrote then
  local g, err = call('HINCRBY', genkey, 'g', 1)
  if not err then
    gen = string.format('%.0f', g)
  end
end
for i = 1, n do
  out[7 * i] = gen
end
return out
