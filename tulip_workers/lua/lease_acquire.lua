-- Take a shard queue's lease if nobody holds it (tulip_workers.lease): the next fencing
-- token, the owner's name, an expiry; the token grows at every takeover and is never
-- given twice (its counter never expires).
--
-- KEYS[1]  the queue's lease (hash: token, owner)
-- KEYS[2]  the queue's fencing-token counter
-- ARGV[1]  the would-be owner's name
-- ARGV[2]  the lease length, ms
-- ARGV[3]  the caller's wall clock, ms: where a counter starts when there is none (a
--          first lease, or a Redis that lost its data without persistence), so a token
--          given after such a loss is still above every token given before it
--
-- Returns {token, owner}: the new token when taken, else {0, the holder's name}.
if redis.call('EXISTS', KEYS[1]) == 1 then
  return {0, redis.call('HGET', KEYS[1], 'owner') or ''}
end
if redis.call('EXISTS', KEYS[2]) == 0 then
  redis.call('SET', KEYS[2], ARGV[3])
end
local token = redis.call('INCR', KEYS[2])
redis.call('HSET', KEYS[1], 'token', token, 'owner', ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return {token, ARGV[1]}
