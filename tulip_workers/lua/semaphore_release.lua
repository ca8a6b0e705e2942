-- Give a slot back.
--
-- KEYS[1]  sorted set of leases (see semaphore_acquire.lua)
-- ARGV[1]  token of the holder
--
-- Returns 1 if the holder still had a live lease, 0 if it was unknown or had already
-- expired (then its slot may have gone to someone else meanwhile; nothing else is
-- touched either way).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local expiry = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not expiry then
  return 0
end
redis.call('ZREM', KEYS[1], ARGV[1])
if tonumber(expiry) <= now then
  return 0
end
return 1
