-- Take a shard queue's lease if nobody holds it (tulip_workers.lease): the next fencing
-- token, the owner's name, an expiry; the token grows at every takeover and is never
-- given twice (its counter never expires).
--
-- KEYS[1]  the queue's lease (hash: token, owner)
-- KEYS[2]  the queue's fencing-token counter
-- ARGV[1]  the would-be owner's name
-- ARGV[2]  the lease length, ms
--
-- Returns {token, owner}: the new token when taken, else {0, the holder's name}.
if redis.call('EXISTS', KEYS[1]) == 1 then
  return {0, redis.call('HGET', KEYS[1], 'owner') or ''}
end
local token = redis.call('INCR', KEYS[2])
redis.call('HSET', KEYS[1], 'token', token, 'owner', ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return {token, ARGV[1]}
