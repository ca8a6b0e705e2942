-- Extend a holder's lease, if it still holds one.
--
-- KEYS[1]  sorted set of leases (see semaphore_acquire.lua)
-- ARGV[1]  token of the holder
-- ARGV[2]  new lease length in milliseconds, counted from now (server clock)
--
-- Returns 1 if renewed, 0 if the lease had expired or was released: an expired
-- lease is never revived, since its slot may already belong to someone else.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lease = tonumber(ARGV[2])

local expiry = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not expiry or tonumber(expiry) <= now then
  return 0
end
redis.call('ZADD', KEYS[1], 'XX', now + lease, ARGV[1])
if redis.call('PTTL', KEYS[1]) < lease then
  redis.call('PEXPIRE', KEYS[1], lease)
end
return 1
