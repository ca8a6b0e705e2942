-- One event onto its shard queue in one round trip (tulip_producer.direct).
-- KEYS: [1] the key's sequence counter, [2] the event's published marker,
--       [3] the role's shard layout record, [4] the shard queue (a kombu list).
--       [5] (a checkpoint save) the thread's pending list (tulip_wire.pending).
-- ARGV: [1] the ordering key (the marker's value), [2] the marker's TTL in ms,
--       [3] the shard count the queue was chosen by, [4..] the message in parts:
--       the sequence number goes between each part and the next; with KEYS[5], the
--       last two are the pending entry and the pending list's TTL in ms.
-- Returns {seq, false}, or {-1, record} when the layout record names another count
-- (or a drain): nothing was done, the caller takes the general path.
local layout = redis.call('GET', KEYS[3])
if layout and layout ~= ARGV[3] then
  return {-1, layout}
end
local seq = redis.call('INCR', KEYS[1])
redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[2])
local last = #ARGV
if KEYS[5] then
  redis.call('RPUSH', KEYS[5], ARGV[last - 1])
  redis.call('PEXPIRE', KEYS[5], ARGV[last])
  last = last - 2
end
redis.call('LPUSH', KEYS[4], table.concat(ARGV, string.format('%d', seq), 4, last))
return {seq, false}
