-- next_seq(key, idle_ms): the next sequence number of an ordering key, and the key's
-- counter kept for idle_ms more (tulip_wire.numbering). Defines a function: the scripts
-- that number an event (number_event.lua, publish_direct.lua) start with this text.
--
-- A number is the larger of the last one + 1 and the Redis server's clock in
-- microseconds, so a counter that expired while its key was idle starts again above
-- every number it gave out (which were at most the clock of their time, plus the
-- rare burst of more than one per microsecond), and the counter needs no TTL-less
-- state. Numbers stay below 2^53 (exact in Lua's doubles, in JSON and in a bigint
-- column) until the year 2255.
local function next_seq(key, idle_ms)
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local last = tonumber(redis.call('GET', key) or '0') or 0
  local step = 1
  if now > last then
    step = now - last
  end
  local seq = redis.call('INCRBY', key, step)
  redis.call('PEXPIRE', key, idle_ms)
  return seq
end
