-- KEYS[1] lease key; ARGV[1] owner id; returns 1 when the lease was deleted, 0 when this owner does not hold it
--
-- Check and delete are one script, so that a late release never deletes the
-- lease of the owner that acquired it after this one's expired. The token
-- counter is never touched.

if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
