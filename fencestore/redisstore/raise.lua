-- KEYS[1] a mark key, optionally KEYS[2] its generation key; ARGV[1] a mark as stored ("t" or "t:s", canonical decimals); returns {had, old, changed}: had 1 when the key held a mark (else 0), old that mark ("" for none), changed 1 when ARGV[1] was written: the key held no mark, or one ordered before ARGV[1] (else 0)
--
-- The operator's raise (fencestore.Keeper.Raise): a mark only moves forward,
-- atomically. Marks are compared as admit.lua compares them: token, then no
-- sequence before any sequence, then sequence, as canonical decimal strings
-- (by length, then byte by byte), never as Lua numbers. A corrupt mark or a
-- key of another type is an error and stays as it is: reset repairs it.
-- A raise that writes advances the generation and makes it the operator's
-- (op): the replicas' remembered marks seen before it are set aside.
if (#KEYS ~= 1 and #KEYS ~= 2) or #ARGV ~= 1 or type(ARGV[1]) ~= 'string' then
  return redis.error_reply('ERR fenceproxy: want a mark key and a mark')
end
local nt, ns = parse(ARGV[1])
if nt == nil then
  return redis.error_reply('ERR fenceproxy: the mark is not a canonical token[:sequence]')
end
local old = redis.call('GET', KEYS[1])
local function operator()
  if KEYS[2] ~= nil then
    local g = redis.call('HINCRBY', KEYS[2], 'g', 1)
    redis.call('HSET', KEYS[2], 'op', g)
  end
end
if old == false then
  redis.call('SET', KEYS[1], ARGV[1])
  operator()
  return {0, '', 1}
end
local ot, oseq = parse(old)
if ot == nil then
  return redis.error_reply('ERR fenceproxy: corrupt mark at ' .. KEYS[1])
end
if before(ot, oseq, nt, ns) then
  redis.call('SET', KEYS[1], ARGV[1])
  operator()
  return {1, old, 1}
end
return {1, old, 0}
