-- KEYS[1] lease key; ARGV[1] owner id, ARGV[2] TTL in milliseconds; returns 1 when the lease was extended, 0 when this owner does not hold it
--
-- Check and extend are one script, so that a lease which expired and went to
-- another owner between them is never extended on the old owner's behalf.

if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
