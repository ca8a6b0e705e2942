-- A leased shard queue's ack (behind fence.lua): kombu's, the tag out of its unacked
-- hash and index.
--
-- KEYS[1]  kombu's unacked hash
-- KEYS[2]  kombu's unacked index
-- ARGV[1]  the delivery tag
redis.call('ZREM', KEYS[2], ARGV[1])
return redis.call('HDEL', KEYS[1], ARGV[1])
