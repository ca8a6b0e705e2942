-- Number one event and mark it published, in one round trip (the general publish path,
-- tulip_producer.producer; the direct path does the same inside publish_direct.lua).
-- Starts with next_seq.lua's and quota.lua's text.
-- KEYS: [1] the key's sequence counter, [2] the event's published marker,
--       [3] the role's shard layout record, [4] the tenant's publish token bucket,
--       [5] (a checkpoint save) the thread's pending list.
-- ARGV: [1] the counter's idle TTL in ms, [2] the marker's TTL in ms, [3] the ordering
--       key (the marker's value), [4] the tenant's publish rate a second (0: none),
--       [5] its burst; with KEYS[5], [6] the pending entry and [7] its list's TTL in ms.
-- Returns {seq, the layout record or false}, or {-2, ms until the tenant may publish}
-- when over its quota (then nothing was written).
local wait = over_quota(KEYS[4], ARGV[4], ARGV[5])
if wait then
  return {-2, wait}
end
local seq = next_seq(KEYS[1], ARGV[1])
redis.call('SET', KEYS[2], ARGV[3], 'PX', ARGV[2])
if KEYS[5] then
  redis.call('RPUSH', KEYS[5], ARGV[6])
  redis.call('PEXPIRE', KEYS[5], ARGV[7])
end
return {seq, redis.call('GET', KEYS[3])}
