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

-- pad writes canonical decimal s in 20 digits, so that the bytes sort as
-- the numbers do.
local function pad(s)
  return string.rep('0', 20 - #s) .. s
end

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
-- the rest (drain.go).
local SNAPSHOT = 256

-- enter puts an entry for the admission (token, seq) into key, with its
-- flight bound (bound, milliseconds in decimal) and id; it returns the
-- member, the members ordered before it (its snapshot, at most SNAPSHOT of
-- them) and whether there were more, or an error text.
--
-- In the common case (nothing older in flight) the key is new: the last
-- release deleted it, since Redis removes an empty sorted set. Its TTL is
-- then set with PEXPIRE NX, which is all a new key needs; NX also leaves
-- alone a key that held entries of the admission's own order (which no
-- snapshot lists). Only a key that had a TTL already, that is one entered
-- before, is read (PTTL) and renewed when its TTL is below this flight's
-- need.
local function enter(key, token, seq, bound, id)
  local order = pad(token) .. ':'
  if seq == '' then
    order = order .. string.rep('-', 20)
  else
    order = order .. pad(seq)
  end
  local member = order .. ':' .. string.rep('0', 12 - #bound) .. bound .. ':' .. id
  local olders, err = call('ZRANGEBYLEX', key, '-', '(' .. order, 'LIMIT', 0, SNAPSHOT + 1)
  if err then return nil, nil, nil, err end
  local more = false
  if #olders > SNAPSHOT then
    olders[SNAPSHOT + 1] = nil
    more = true
  end
  local _
  _, err = call('ZADD', key, 0, member)
  if err then return nil, nil, nil, err end
  local flight = tonumber(bound)
  local set = 0
  if #olders == 0 then
    set, err = call('PEXPIRE', key, string.format('%.0f', flight + GCSET), 'NX')
  end
  if not err and set == 0 then
    local ttl
    ttl, err = call('PTTL', key)
    if not err and ttl < flight + GC then
      _, err = call('PEXPIRE', key, string.format('%.0f', flight + GCSET))
    end
  end
  if err then
    call('ZREM', key, member)
    return nil, nil, nil, err
  end
  return member, olders, more
end

-- release removes member from key and returns 1, or 0 when it was not
-- there (released before, or removed as abandoned). A member that was
-- there, when its key still holds an entry ordered after it, is published
-- on channel (the member as the payload): only such an entry's request can
-- have been waiting for this one (equal orders never wait), and each
-- waiter that holds the member in its snapshot counts it as gone, with no
-- look of its own at the store. A member given as "order:*:id" (the
-- order's 41 bytes, then ":*:" and the id) is the entry of that order and
-- id whatever its bound: the release of an admission whose reply was lost.
-- A key of another type fails its own release only: every command goes
-- through call.
local function release(key, member, channel)
  if string.sub(member, 42, 44) == ':*:' then
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
  if #member < 41 or call('ZREM', key, member) ~= 1 then
    return 0
  end
  -- ';' follows ':' in bytes: every member of an equal order ("order:...")
  -- sorts below "order;", every member of a later order above it. This
  -- look is what keeps a release that nobody can wait for (the common
  -- case: the key is empty now, and gone) from publishing: a message
  -- would reach every replica's subscription.
  local after = call('ZRANGEBYLEX', key, '[' .. string.sub(member, 1, 41) .. ';', '+', 'LIMIT', 0, 1)
  if after and #after > 0 then
    call('PUBLISH', channel, member)
  end
  return 1
end
