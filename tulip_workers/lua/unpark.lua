-- Take a key's oldest parked message back: onto the head of its queue (the end consumed
-- next), recording its delivery tag as the key's message on its way back, in one atomic
-- step (tulip_workers.parking). The consumer lets that message through although the key
-- still has parked messages (later ones); the record goes when the message is recorded
-- as unacked (unacked_from_delivering.lua), so a restart in between finds it too.
--
-- kombu's Redis transport consumes from the RIGHT end of a queue list: RPUSH puts the
-- message there, ahead of everything on the queue (all of it newer than the parked
-- messages of this key, or of other keys).
--
-- KEYS[1]  the key's parked list
-- KEYS[2]  the queue's parked index (hash: ordering key -> messages parked)
-- KEYS[3]  the queue's unparking record (hash: ordering key -> delivery tag)
-- KEYS[4]  the queue's list
-- ARGV[1]  the ordering key
--
-- Returns {tag, messages still parked}; {false, n} when a message of the key is on its
-- way back already (one at a time), {false, 0} when none is parked.
local on_its_way = redis.call('HGET', KEYS[3], ARGV[1])
if on_its_way then
  return {false, tonumber(redis.call('HGET', KEYS[2], ARGV[1]) or '0')}
end
local item = redis.call('LINDEX', KEYS[1], 0)
if not item then
  redis.call('HDEL', KEYS[2], ARGV[1])
  return {false, 0}
end
local ok, message = pcall(cjson.decode, item)
local tag = ok and type(message) == 'table' and type(message['properties']) == 'table'
  and message['properties']['delivery_tag']
if type(tag) ~= 'string' then
  tag = redis.sha1hex(item)  -- never expected: only messages with a tag are parked
end
redis.call('LPOP', KEYS[1])
local left = redis.call('HINCRBY', KEYS[2], ARGV[1], -1)
if left <= 0 then
  redis.call('HDEL', KEYS[2], ARGV[1])
  left = 0
end
redis.call('HSET', KEYS[3], ARGV[1], tag)
redis.call('RPUSH', KEYS[4], item)
return {tag, left}
