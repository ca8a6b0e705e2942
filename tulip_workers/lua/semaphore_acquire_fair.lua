-- Admit one more holder of a tenant to a counting semaphore shared fairly across
-- tenants, or refuse without waiting (tulip_workers.semaphore, invariant 9).
--
-- KEYS[1]  sorted set of leases (see semaphore_acquire.lua); a member is
--          "<tenant>\31<token>", so the holders per tenant are counted from it
-- KEYS[2]  sorted set of tenants waiting: tenant -> when it began to wait for its turn
-- KEYS[3]  sorted set of tenants asking: tenant -> when it last asked
-- ARGV[1]  limit: most holders at once
-- ARGV[2]  lease length in milliseconds
-- ARGV[3]  token of the new holder ("<tenant>\31<random>")
-- ARGV[4]  the tenant
-- ARGV[5]  most holders one tenant may have (its share of the limit)
-- ARGV[6]  how long a tenant that stopped asking still counts as waiting, in ms
--
-- A free slot goes to the waiting tenant holding the fewest slots, and among those to
-- the one that began to wait first: a tenant that asks while another ranks before it
-- is refused (and waits its turn), so one tenant's many waiting calls cannot take every
-- slot that frees while another tenant waits. Returns 1 if admitted, 0 if not.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local limit, lease = tonumber(ARGV[1]), tonumber(ARGV[2])
local tenant, cap = ARGV[4], tonumber(ARGV[5])

redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
-- tenants that stopped asking (their callers gave up or died) wait no more
local gone = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now - tonumber(ARGV[6]))
for i = 1, #gone do
  redis.call('ZREM', KEYS[2], gone[i])
  redis.call('ZREM', KEYS[3], gone[i])
end
redis.call('ZADD', KEYS[3], now, tenant)
redis.call('PEXPIRE', KEYS[3], lease)

local members = redis.call('ZRANGE', KEYS[1], 0, -1)
local held = {}
for i = 1, #members do
  local owner = string.match(members[i], '^(.-)\31') or ''
  held[owner] = (held[owner] or 0) + 1
end
local mine = held[tenant] or 0

local function wait()
  redis.call('ZADD', KEYS[2], 'NX', now, tenant)
  redis.call('PEXPIRE', KEYS[2], lease)
  return 0
end

if #members >= limit or mine >= cap then
  return wait()
end
local since = tonumber(redis.call('ZSCORE', KEYS[2], tenant)) or now
local waiting = redis.call('ZRANGE', KEYS[2], 0, -1, 'WITHSCORES')
for i = 1, #waiting, 2 do
  local other, other_since = waiting[i], tonumber(waiting[i + 1])
  local theirs = held[other] or 0
  if other ~= tenant and theirs < cap then
    if theirs < mine or (theirs == mine and other_since < since) then
      return wait()
    end
  end
end

redis.call('ZADD', KEYS[1], now + lease, ARGV[3])
redis.call('ZREM', KEYS[2], tenant)
if redis.call('PTTL', KEYS[1]) < lease then
  redis.call('PEXPIRE', KEYS[1], lease)
end
return 1
