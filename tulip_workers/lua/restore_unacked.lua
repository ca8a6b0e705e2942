-- Move unacknowledged messages of a dead consumer back to the head of their queues,
-- and count, per message, how many consumers died while running it (a message merely
-- reserved, waiting in the consumer's buffer, is not counted: it did not kill anyone).
--
-- kombu's Redis transport publishes with LPUSH and consumes with BRPOP/RPOP, so the
-- head (the end consumed next) is the RIGHT end of the list: RPUSH puts a message
-- there. Moves arrive oldest first and must be consumed oldest first, so they are
-- pushed newest first.
--
-- A message the dead consumer had popped but not yet recorded as unacked sits on its
-- queue's delivering list (tulip_workers.reliable_redis); it is newer than every unacked
-- one, so it goes back behind them: pushed before them, newest first (the delivering
-- list holds the newest at its LEFT end).
--
-- KEYS[1]          kombu's unacked hash   (tag -> JSON [payload, exchange, routing_key])
-- KEYS[2]          kombu's unacked index  (sorted set: tag -> delivery time)
-- KEYS[2+i]        the list that move i pushes to            (i = 1..n)
-- KEYS[2+n+i]      the death counter of move i's message (by task id)
-- KEYS[2+2n+2p-1]  the delivering list of queue p            (p = 1..q)
-- KEYS[2+2n+2p]    queue p's list
-- ARGV             four values per move i: tag, the hash entry exactly as read (a guard:
--                  if kombu acked or restored it meanwhile, the move is skipped), payload,
--                  "1" if the dead consumer was running it; then the counters' time to
--                  live; then q
--
-- Returns how many messages were moved (distinct unacked tags plus delivering items).
local queues = tonumber(ARGV[#ARGV])
local moves = (#KEYS - 2 - 2 * queues) / 2
local ttl = ARGV[4 * moves + 1]
local moved = 0

for p = 1, queues do
  local delivering, queue = KEYS[2 + 2 * moves + 2 * p - 1], KEYS[2 + 2 * moves + 2 * p]
  local items = redis.call('LRANGE', delivering, 0, -1)
  for j = 1, #items do
    redis.call('RPUSH', queue, items[j])
    moved = moved + 1
  end
  redis.call('DEL', delivering)
end

local live = {}
for i = 1, moves do
  local tag = ARGV[4 * i - 3]
  if live[tag] == nil then
    live[tag] = redis.call('HGET', KEYS[1], tag) == ARGV[4 * i - 2]
  end
end

for i = moves, 1, -1 do
  if live[ARGV[4 * i - 3]] then
    redis.call('RPUSH', KEYS[2 + i], ARGV[4 * i - 1])
  end
end

local counted = {}
for i = 1, moves do
  local tag = ARGV[4 * i - 3]
  if live[tag] and ARGV[4 * i] == '1' and not counted[tag] then
    counted[tag] = true
    redis.call('INCR', KEYS[2 + moves + i])
    redis.call('EXPIRE', KEYS[2 + moves + i], ttl)
  end
end

for tag, ok in pairs(live) do
  if ok then
    redis.call('HDEL', KEYS[1], tag)
    redis.call('ZREM', KEYS[2], tag)
    moved = moved + 1
  end
end
return moved
