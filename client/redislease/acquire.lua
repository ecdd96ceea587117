-- KEYS[1] lease key, KEYS[2] token counter key; ARGV[1] owner id, ARGV[2] TTL in milliseconds; returns the new token as a decimal string, or nil when another owner holds the lease
--
-- The grant and the token are one script, so they happen together or not at
-- all, and no acquisition can slip between them: every grant gets a token
-- greater than that of every grant before it. A refused acquisition mints
-- nothing. The same owner acquiring again gets a new token (see Acquire).

local holder = redis.call('GET', KEYS[1])
if holder and holder ~= ARGV[1] then
  return false
end

-- INCR before SET: if the counter cannot be incremented (not an integer, or
-- at 2^63-1) the script stops here with an error and nothing is granted.
local n = redis.call('INCR', KEYS[2])
if n < 1 then
  -- Someone wrote a negative number; tokens are positive.
  return redis.error_reply('ERR redislease: token counter ' .. KEYS[2] .. ' is not positive')
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])

-- The counter is returned as Redis stores it, a decimal string: INCR's
-- integer reply becomes a Lua number, a double, exact only up to 2^53.
return redis.call('GET', KEYS[2])
