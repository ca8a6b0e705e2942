-- Renew (ARGV[2] ms) or release (ARGV[2] = 0) a lease, only while it still carries the
-- caller's fencing token (tulip_workers.lease).
--
-- KEYS[1]  the queue's lease (hash: token, owner)
-- ARGV[1]  the caller's token
-- ARGV[2]  the new lease length, ms; 0 releases it
--
-- Returns 1, or 0 when the lease is gone or another's (the caller lost it).
if redis.call('HGET', KEYS[1], 'token') ~= ARGV[1] then
  return 0
end
if tonumber(ARGV[2]) == 0 then
  redis.call('DEL', KEYS[1])
else
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 1
