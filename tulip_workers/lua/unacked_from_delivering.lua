-- Record a message taken off a queue's delivering list as unacked, and take it off that
-- list, in one atomic step (tulip_workers.reliable_redis). The unacked entry is built
-- here from the list's own item, so the message does not cross the wire again: the
-- consumer sends only its digest.
--
-- The delivering list holds one consumer's one message between its BLMOVE and this
-- script (a shard queue has one consumer, and it records each message before it asks
-- for the next); the item is still found by its digest, not assumed to be at the left
-- end, so a second consumer of the same queue cannot make this take another's message.
--
-- KEYS[1]  the queue's delivering list
-- KEYS[2]  kombu's unacked hash   (tag -> JSON [payload, exchange, routing_key])
-- KEYS[3]  kombu's unacked index  (sorted set: tag -> delivery time)
-- ARGV[1]  the delivery tag
-- ARGV[2]  the delivery time
-- ARGV[3]  sha1 hex of the item
-- ARGV[4]  the entry's tail after the payload: ,"<exchange>","<routing key>"]
-- KEYS[4], ARGV[5], ARGV[6]  (a message taken back from parking, tulip_workers.parking)
--          the queue's unparking record, the message's ordering key and delivery tag:
--          the key's record goes in the same step, if it still names this message
--
-- Returns 1, or 0 (nothing done) when the list has no such item.
local items = redis.call('LRANGE', KEYS[1], 0, -1)
for i = 1, #items do
  if redis.sha1hex(items[i]) == ARGV[3] then
    if i == 1 then
      redis.call('LPOP', KEYS[1])
    else
      redis.call('LREM', KEYS[1], 1, items[i])
    end
    redis.call('ZADD', KEYS[3], ARGV[2], ARGV[1])
    redis.call('HSET', KEYS[2], ARGV[1], '[' .. items[i] .. ARGV[4])
    if KEYS[4] and redis.call('HGET', KEYS[4], ARGV[5]) == ARGV[6] then
      redis.call('HDEL', KEYS[4], ARGV[5])
    end
    return 1
  end
end
return 0
