-- Prepended to every script that changes a leased shard queue's state (consume, record
-- as unacked, ack, park, take back, restore): it runs only while the queue's lease still
-- carries the caller's fencing token (tulip_workers.fencing). The lease key is the
-- script's last key, the token its last argument; both are removed before the body runs,
-- so the body reads its keys and arguments as it would unfenced.
local fence_key, fence_token = KEYS[#KEYS], ARGV[#ARGV]
if redis.call('HGET', fence_key, 'token') ~= fence_token then
  return redis.error_reply("FENCED the lease is another's")
end
table.remove(KEYS)
table.remove(ARGV)
