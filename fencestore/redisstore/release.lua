-- KEYS[1..N] in-flight keys; ARGV[1..N] the member to remove from each, then ARGV[N+1] the channel to announce on; returns the number of members removed
--
-- One call ends one request's flight or a batch of them (the releases of a
-- group commit that carries no admission: otherwise they ride admit.lua's
-- run), or removes an entry a waiter has watched past its bound
-- (abandoned: flight.go). flight.lua's release says what each does.

local n = #KEYS
if #ARGV ~= n + 1 then
  return redis.error_reply('ERR fenceproxy: want a member per in-flight key, then the channel')
end
local channel = ARGV[n + 1]
local removed = 0
for i = 1, n do
  removed = removed + release(KEYS[i], ARGV[i], channel)
end
return removed
