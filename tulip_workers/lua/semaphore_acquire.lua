-- Admit one more holder to a counting semaphore, or refuse without waiting.
--
-- KEYS[1]  sorted set of leases: member = holder token, score = lease expiry in
--          milliseconds on the Redis server's clock (so the clocks of the hosts
--          running workers never matter)
-- ARGV[1]  limit: most holders at once
-- ARGV[2]  lease length in milliseconds
-- ARGV[3]  token of the new holder
--
-- Returns 1 if admitted, 0 if the semaphore is full. Needs Redis >= 5 (effects
-- replication, so calling TIME before a write is allowed).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lease = tonumber(ARGV[2])

-- A holder that crashed never releases; its lease simply runs out.
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[1]) then
  return 0
end
redis.call('ZADD', KEYS[1], now + lease, ARGV[3])
-- The whole set disappears once its longest lease is over.
if redis.call('PTTL', KEYS[1]) < lease then
  redis.call('PEXPIRE', KEYS[1], lease)
end
return 1
