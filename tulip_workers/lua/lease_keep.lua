-- Keep a shard queue's lease (tulip_workers.lease): renew it while it carries the
-- caller's fencing token, or take it back with that same token when it is gone and no
-- token was given since (the fencing-token counter still at the caller's): the lease
-- lapsed while its owner could not reach Redis (Redis restarted, a pause, a partition),
-- and nobody else owned the queue in between, so nobody else consumed or acked it.
-- Once another took it (the counter moved on), or the counter is gone with a Redis that
-- lost its data, the caller has lost it.
--
-- KEYS[1]  the queue's lease (hash: token, owner)
-- KEYS[2]  the queue's fencing-token counter
-- ARGV[1]  the owner's name
-- ARGV[2]  the owner's token
-- ARGV[3]  the lease length, ms
--
-- Returns 1 when renewed, 2 when taken back, 0 when lost.
local held = redis.call('HGET', KEYS[1], 'token')
if held == ARGV[2] then
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  return 1
end
if held or redis.call('GET', KEYS[2]) ~= ARGV[2] then
  return 0
end
redis.call('HSET', KEYS[1], 'token', ARGV[2], 'owner', ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 2
