-- KEYS[1] an in-flight key; ARGV[1] the member of the request that waits; returns {older, expired, remaining}: older 1 when an entry ordered before the member is in flight (else 0), expired how many such entries were past their deadlines and were removed, remaining the milliseconds until the earliest deadline among the live older entries it saw (0 when none)
--
-- Drain runs it until older is 0. The order is the member's first 41 bytes
-- (admit.lua says how members are made); the entries ordered before it are
-- the members below that prefix, and those past their deadline by the
-- server's clock are removed here as admit.lua removes them: a request whose
-- replica died holds the others back until its deadline, no longer.

if #KEYS ~= 1 or #ARGV ~= 1 or #ARGV[1] < 58 then
  return redis.error_reply('ERR fenceproxy: want an in-flight key and a member')
end
local key, order = KEYS[1], string.sub(ARGV[1], 1, 41)
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

-- remaining is only the fallback timer of a waiter (a release wakes it
-- sooner), so one page of live entries is enough to find it: past the
-- page the waiter finds out at its next look.
local older, expired, earliest = 0, 0, nil
local offset = 0
while true do
  local page = redis.call('ZRANGEBYLEX', key, '-', '(' .. order, 'LIMIT', offset, 64)
  for _, m in ipairs(page) do
    local d = tonumber(string.sub(m, 43, 57))
    if d ~= nil and d > now then
      older, offset = 1, offset + 1
      if earliest == nil or d < earliest then
        earliest = d
      end
    else
      redis.call('ZREM', key, m)
      expired = expired + 1
    end
  end
  if #page < 64 or older == 1 then
    break
  end
end
local remaining = 0
if earliest ~= nil then
  remaining = earliest - now
end
return {older, expired, remaining}
