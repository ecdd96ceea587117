-- KEYS[1..N] in-flight keys; ARGV[1..N] the member to remove from each, then ARGV[N+1] the channel to announce on; returns the number of members removed
--
-- One call ends one request's flight or a batch of them (the releases of a
-- group commit), or removes an entry a waiter has watched past its bound
-- (abandoned: flight.go). A member that was there, when its key still holds
-- an entry ordered after it, is published on the channel (the member as the
-- payload): only such an entry's request can have been waiting for this one
-- (equal orders never wait), and each waiter that holds the member in its
-- snapshot counts it as gone, with no look of its own at the store. A
-- member already gone (released, or removed as abandoned) publishes nothing.
-- A member given as "order:*:id" (the order's 41 bytes, then ":*:" and the
-- id) is the entry of that order and id whatever its bound: the release of
-- an admission whose reply was lost. Every comparison is of bytes (Redis's
-- ZRANGEBYLEX, string equality), never Lua's '<' on strings, which follows
-- the server's locale. A key of another type fails its own release only:
-- every command goes through call.

local n = #KEYS
if #ARGV ~= n + 1 then
  return redis.error_reply('ERR fenceproxy: want a member per in-flight key, then the channel')
end
local channel = ARGV[n + 1]
local removed = 0
for i = 1, n do
  local key, member = KEYS[i], ARGV[i]
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
  if #member >= 41 and call('ZREM', key, member) == 1 then
    removed = removed + 1
    -- ';' follows ':' in bytes: every member of an equal order ("order:...")
    -- sorts below "order;", every member of a later order above it.
    local after = call('ZRANGEBYLEX', key, '[' .. string.sub(member, 1, 41) .. ';', '+', 'LIMIT', 0, 1)
    if after and #after > 0 then
      call('PUBLISH', channel, member)
    end
  end
end
return removed
