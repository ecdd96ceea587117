-- flight.lua: the drain barrier's entries, which admit.lua enters and
-- release.lua (or admit.lua, for the releases that ride an admission's run)
-- removes. Like marks.lua it is not a script of its own: the Go side puts
-- it in front of those that use it.
--
-- An in-flight key is a sorted set whose scores are all 0, so that its
-- members sort by their bytes (Redis compares them with memcmp, never by a
-- locale): order (the token in 20 digits, ':', the sequence in 20 digits
-- or 20 '-' for none: '-' sorts before '0', so no sequence comes before
-- every sequence), ':', the flight bound (milliseconds, 12 digits: a
-- duration, not a deadline), ':', the id. Every comparison here is of
-- bytes (ZRANGEBYLEX, string equality), never Lua's '<' on strings, which
-- follows the server's locale.

-- GC is how long past the longest flight entered in an in-flight key the
-- key is kept (two days, in milliseconds): its TTL only collects a key that
-- nobody enters any more, never an entry anybody may still wait for, so a
-- step of the server's clock by up to a day removes nothing the barrier
-- needs. A key is set to live a day more than that (GCSET), so that a busy
-- key's TTL is renewed about once a day, not per admission.
local GC = 172800000
local GCSET = GC + 86400000

-- SNAPSHOT is the most entries an admission's snapshot lists (Go's
-- snapshotCap): the oldest, by order. With more in flight before it, the
-- reply says so (olders 2) and the waiter, once those are gone, looks for
-- the rest (drain.go). LIMIT is the count one look asks for, as Redis
-- takes it (a string: a number would be formatted on every call).
local SNAPSHOT = 256
local LIMIT = '257'

-- WAITED begins an entry's flag: WAITED .. member, in the same key, says
-- that an admission ordered after the entry found it in flight, so that
-- its release must be announced. '~' sorts after every digit: no range
-- of entries (each begins with its order's 20 digits) holds a flag, and
-- only a release reads them (release, below).
local WAITED = '~'

-- ensured maps each in-flight key this script run entered to the longest
-- flight whose TTL it made sure of: a later admission of the same run on
-- that key, with a flight no longer, knows the key is there with its TTL
-- (the admissions of a run only add entries, and the one that takes its
-- entry out again forgets the key here).
local ensured = {}

-- flaggedRun holds the members this run flagged (or entered flagged): a
-- later admission of the run that finds them flags only the others, and
-- none at all when they all are (one command less per admission when
-- many of one resource share a run).
local flaggedRun = {}

-- ttls maps each flight bound (milliseconds, as the argument gives it) of
-- this run to the TTL a key entered with it is set to, flight + GCSET:
-- formatted once per run, not per admission.
local ttls = {}
local function ttlFor(bound, flight)
  local ttl = ttls[bound]
  if ttl == nil then
    ttl = string.format('%.0f', flight + GCSET)
    ttls[bound] = ttl
  end
  return ttl
end

-- NOSEQ is the order's sequence field of an admission without one, with
-- the colons either side; EMPTY is the snapshot of an admission that found
-- nothing in flight (never written: a look replaces it).
local NOSEQ = ':--------------------:'
local EMPTY = {}

-- suffixes maps each flight bound (milliseconds, as the argument gives it)
-- of this run to a member's bound field in 12 digits and the ':' after it.
local suffixes = {}
local function suffixFor(bound)
  local sfx = suffixes[bound]
  if sfx == nil then
    sfx = string.rep('0', 12 - #bound) .. bound .. ':'
    suffixes[bound] = sfx
  end
  return sfx
end

-- flagAll flags every entry of key ordered before order and after last,
-- the last entry a snapshot lists (an admission with more entries before
-- it than that): its waiter reads those later (drain.go), and their
-- releases must be announced too.
local function flagAll(key, order, last)
  local _, err
  while true do
    local page
    page, err = call('ZRANGEBYLEX', key, '(' .. last, '(' .. order, 'LIMIT', '0', LIMIT)
    if err then return err end
    if #page == 0 then return nil end
    local args = {}
    for i, m in ipairs(page) do
      args[2 * i - 1], args[2 * i] = '0', WAITED .. m
    end
    _, err = call('ZADD', key, unpack(args))
    if err then return err end
    last = page[#page]
  end
end

-- flagArgs appends to args ("0", flag) for each member of olders this run
-- has not flagged yet, and returns args.
local function flagArgs(args, olders)
  for _, m in ipairs(olders) do
    if not flaggedRun[m] then
      local k = #args
      args[k + 1], args[k + 2] = '0', WAITED .. m
    end
  end
  return args
end

-- noteFlagged notes every member of olders as flagged in this run, once
-- the ZADD that flags them has succeeded (a refused one, out of memory,
-- flagged nothing); those flagged before are noted again, harmlessly.
local function noteFlagged(olders)
  for _, m in ipairs(olders) do
    flaggedRun[m] = true
  end
end

-- enter puts an entry for the admission (token, seq) into key, with its
-- flight bound (bound, milliseconds in decimal) and id; it returns the
-- member, the members ordered before it (its snapshot, at most SNAPSHOT of
-- them) and whether there were more, or an error text. With flag (a later
-- admission of the run enters key too) the entry goes in flagged.
--
-- In the common case (nothing older in flight) the key is new: the last
-- release deleted it, since Redis removes an empty sorted set. The entry
-- goes in first (ZADD), then PEXPIRE NX sets the key's TTL, which all a
-- new key needs, and answers 1 only for a key that had no TTL: every
-- in-flight key gets one in the script run that creates it, so that key
-- was new, held nothing else, and the snapshot is empty without a look.
-- A key that was there already is read: its entries ordered before this
-- one (ZRANGEBYLEX), which are flagged as waited for (WAITED), and its TTL
-- (PTTL), renewed when below this flight's need.
--
-- With busy (the caller has requests of this resource in flight itself,
-- so that older ones likely are) the look comes first instead: when it
-- finds older entries, the entry and their flags go in with one ZADD, and
-- PEXPIRE NX is not needed (a key that holds entries has its TTL), so a
-- contended admission costs what it did before the common case lost its
-- look. Either order decides alike: busy is a hint, never a premise.
local function enter(key, token, seq, bound, id, flag, busy)
  -- The member in one concatenation (one string made, not one per part),
  -- the bound's field cut once per run (suffixFor); its order (the first
  -- 41 bytes) is cut only for a look.
  local member
  if seq == '' then
    member = string.rep('0', 20 - #token) .. token .. NOSEQ .. suffixFor(bound) .. id
  else
    member = string.rep('0', 20 - #token) .. token .. ':' .. string.rep('0', 20 - #seq) .. seq .. ':' .. suffixFor(bound) .. id
  end
  local order
  local flight = tonumber(bound)
  -- need: this run has not made sure of the key's TTL for this flight.
  local need = ensured[key] == nil or ensured[key] < flight
  local olders, more, looked = EMPTY, false, false
  local _, err
  if busy then
    order = string.sub(member, 1, 41)
    olders, err = call('ZRANGEBYLEX', key, '-', '(' .. order, 'LIMIT', '0', LIMIT)
    if err then return nil, nil, nil, err end
    looked = true
  end
  local set = 0
  if #olders > 0 then
    local entry = {'0', member}
    if flag then
      entry[3], entry[4] = '0', WAITED .. member
    end
    if #olders > SNAPSHOT then
      err = flagAll(key, order, olders[SNAPSHOT])
      if err then return nil, nil, nil, err end
      olders[SNAPSHOT + 1] = nil
      more = true
    end
    local args = flagArgs(entry, olders)
    _, err = call('ZADD', key, unpack(args))
    if err then return nil, nil, nil, err end
    noteFlagged(olders)
  else
    if flag then
      _, err = call('ZADD', key, '0', member, '0', WAITED .. member)
    else
      _, err = call('ZADD', key, '0', member)
    end
    if err then return nil, nil, nil, err end
    if need then
      set, err = call('PEXPIRE', key, ttlFor(bound, flight), 'NX')
    end
    if not err and set ~= 1 and not looked then
      order = string.sub(member, 1, 41)
      olders, err = call('ZRANGEBYLEX', key, '-', '(' .. order, 'LIMIT', '0', LIMIT)
      if not err and #olders > 0 then
        if #olders > SNAPSHOT then
          err = flagAll(key, order, olders[SNAPSHOT])
          olders[SNAPSHOT + 1] = nil
          more = true
        end
        local args = flagArgs({}, olders)
        if not err and #args > 0 then
          _, err = call('ZADD', key, unpack(args))
          if not err then
            noteFlagged(olders)
          end
        end
      end
    end
  end
  if not err and need and set ~= 1 then
    local ttl
    ttl, err = call('PTTL', key)
    if not err and ttl < flight + GC then
      _, err = call('PEXPIRE', key, ttlFor(bound, flight))
    end
  end
  if err then
    call('ZREM', key, member, WAITED .. member)
    ensured[key] = nil
    return nil, nil, nil, err
  end
  if need then
    ensured[key] = flight
  end
  if flag then
    flaggedRun[member] = true
  end
  return member, olders, more
end

-- forget tells enter that member, entered in key by this run, was taken
-- out again (its mark could not be written): the key may be gone.
local function forget(key, member)
  call('ZREM', key, member, WAITED .. member)
  ensured[key] = nil
end

-- release removes member from key and returns 1, or 0 when it was not
-- there (released before, or removed as abandoned). A member that an
-- admission ordered after it found in flight (its flag, WAITED .. member,
-- is there) is published on channel (the member as the payload): only
-- such an admission's request can be waiting for it (equal orders never
-- wait), and each waiter that holds the member in its snapshot counts it
-- as gone, with no look of its own at the store. The flag goes with its
-- entry, in the same ZREM, whose count says which were there: 2 both, 1
-- the entry alone (a flag is never there without its entry: it is set
-- beside an entry in flight, and leaves with it). So a release that nobody
-- waits for (the common case) costs one command, and publishes nothing: a
-- message would reach every replica's subscription. A member given as
-- "order:*:id" (the order's 41 bytes, then ":*:" and the id) is the entry
-- of that order and id whatever its bound: the release of an admission
-- whose reply was lost. A key of another type fails its own release
-- only: every command goes through call.
local function release(key, member, channel)
  -- (Byte 43 is a digit of the bound in a member, '*' (42) in that form:
  -- a byte, so that no string is made per release.)
  if string.byte(member, 43) == 42 and string.sub(member, 42, 44) == ':*:' then
    -- "order:*:id": an admission whose reply was lost, so that its member
    -- is not known; it is the one of its order with that id.
    local order, suffix = string.sub(member, 1, 41), string.sub(member, 44)
    member = ''
    local same = call('ZRANGEBYLEX', key, '[' .. order .. ':', '(' .. order .. ';')
    for _, m in ipairs(same or {}) do
      if string.sub(m, -#suffix) == suffix then
        member = m
        break
      end
    end
  end
  if #member < 41 then
    return 0
  end
  local n = call('ZREM', key, member, WAITED .. member)
  if n == 2 then
    call('PUBLISH', channel, member)
  elseif n ~= 1 then
    return 0
  end
  return 1
end
