-- over_quota(key, rate, burst): a tenant's publish token bucket (tulip_producer.quota).
-- Defines a function: the scripts that number an event start with this text, so the
-- quota is checked in the publish's own round trip, before anything is written.
--
-- The bucket holds up to `burst` tokens and gains `rate` a second (the Redis server's
-- clock); a publish takes one. Returns false (a token taken) or the milliseconds until
-- one is there (nothing taken). rate <= 0: no quota, and the bucket is never read. The
-- hash expires once it would be full again: forgetting a full bucket changes nothing.
local function over_quota(key, rate, burst)
  rate, burst = tonumber(rate), tonumber(burst)
  if rate <= 0 then
    return false
  end
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
  local held = redis.call('HMGET', key, 'tokens', 'at')
  local tokens, at = tonumber(held[1]) or burst, tonumber(held[2]) or now
  tokens = math.min(burst, tokens + math.max(0, now - at) * rate / 1000)
  if tokens < 1 then
    return math.ceil((1 - tokens) * 1000 / rate)
  end
  redis.call('HSET', key, 'tokens', tostring(tokens - 1), 'at', tostring(now))
  redis.call('PEXPIRE', key, math.ceil((burst - tokens + 1) * 1000 / rate) + 1000)
  return false
end
