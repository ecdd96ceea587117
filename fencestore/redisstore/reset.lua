-- KEYS[1] a mark key, optionally KEYS[2] its generation key; ARGV[1] the mark to set, as stored ("t" or "t:s", canonical decimals), or "" to delete the key; returns {had, old}: had 1 when the key existed (else 0), old its value ("" for none, and for a key of another type than a string)
--
-- The operator's reset (fencestore.Keeper.Reset): the mark is set or
-- deleted whatever it was, atomically with reading the old one. A corrupt
-- old value, or a key of another type, is replaced too: that is how an
-- operator repairs it. It advances the generation and makes it the
-- operator's (op): the replicas' remembered marks seen before it are set
-- aside, so that a reset is not raised back.
if (#KEYS ~= 1 and #KEYS ~= 2) or #ARGV ~= 1 or type(ARGV[1]) ~= 'string' then
  return redis.error_reply('ERR fenceproxy: want a mark key and a mark or ""')
end
if ARGV[1] ~= '' and parse(ARGV[1]) == nil then
  return redis.error_reply('ERR fenceproxy: the mark is neither empty nor a canonical token[:sequence]')
end
-- GET raises WRONGTYPE on a key of another type: pcall takes it as "there
-- was something", whose value is no mark.
local had, old = 1, redis.pcall('GET', KEYS[1])
if old == false then
  had, old = 0, ''
elseif type(old) ~= 'string' then
  old = ''
end
if ARGV[1] == '' then
  redis.call('DEL', KEYS[1])
else
  redis.call('SET', KEYS[1], ARGV[1])
end
if KEYS[2] ~= nil then
  local g = redis.call('HINCRBY', KEYS[2], 'g', 1)
  redis.call('HSET', KEYS[2], 'op', g)
end
return {had, old}
