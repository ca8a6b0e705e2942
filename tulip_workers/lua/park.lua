-- Park a message: take it off its queue's delivering list and put it at the tail of its
-- key's parked list, in one atomic step (tulip_workers.parking). At every instant the
-- message is on exactly one list: delivering (a restart puts it back at the head of its
-- queue, from where it is parked again) or parked (where it waits, in order).
--
-- KEYS[1]  the queue's delivering list
-- KEYS[2]  the key's parked list
-- KEYS[3]  the queue's parked index (hash: ordering key -> messages parked)
-- ARGV[1]  sha1 hex of the item
-- ARGV[2]  the ordering key
--
-- Returns the messages now parked for the key, or 0 (nothing done) when the delivering
-- list has no such item.
local items = redis.call('LRANGE', KEYS[1], 0, -1)
for i = 1, #items do
  if redis.sha1hex(items[i]) == ARGV[1] then
    if i == 1 then
      redis.call('LPOP', KEYS[1])
    else
      redis.call('LREM', KEYS[1], 1, items[i])
    end
    redis.call('RPUSH', KEYS[2], items[i])
    return redis.call('HINCRBY', KEYS[3], ARGV[2], 1)
  end
end
return 0
