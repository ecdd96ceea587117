-- KEYS[1] an identity record; ARGV[1] a lost record, ARGV[2] the identity record the caller expected; returns the record KEYS[1] holds after the call: ARGV[1], unless it held a lost record already, or a forced record that supersedes ARGV[2], which stay
--
-- A replica that found the store lost (fencestore.Keeper.MarkLost) writes a
-- lost record in place of the identity record, so that every replica, one
-- that starts cold included, refuses the store until an operator forces a
-- new record. A forced record supersedes the one expected when it is
-- another and was forced no earlier (fencestore.Supersedes): the operator
-- recovered since, and it stays.
if #KEYS ~= 1 or #ARGV ~= 2 then
  return redis.error_reply('ERR fenceproxy: want an identity key, a lost record and the identity expected')
end
local function forcedAt(id)
  local t = string.match(id, '^forced%-(%d%d%d%d%d%d%d%d%d%d%d%d%d)%-')
  if t == nil then return 0 end
  return tonumber(t)
end
local held = redis.call('GET', KEYS[1])
if held ~= false then
  if string.sub(held, 1, 5) == 'lost-' then
    return held
  end
  if string.sub(held, 1, 7) == 'forced-' and held ~= ARGV[2] and forcedAt(held) >= forcedAt(ARGV[2]) then
    return held
  end
end
redis.call('SET', KEYS[1], ARGV[1])
return ARGV[1]
