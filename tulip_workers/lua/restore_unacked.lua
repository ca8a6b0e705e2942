-- Move unacknowledged messages of a dead consumer back to the head of their queues.
-- (Deaths are counted by each run, not here: tulip_workers.redelivery.running.)
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
-- KEYS[2+n+2p-1]   the delivering list of queue p            (p = 1..q)
-- KEYS[2+n+2p]     queue p's list
-- ARGV             three values per move i: tag, the hash entry exactly as read (a guard:
--                  if kombu acked or restored it meanwhile, the move is skipped), payload;
--                  then q
--
-- Returns how many messages were moved (distinct unacked tags plus delivering items).
local queues = tonumber(ARGV[#ARGV])
local moves = #KEYS - 2 - 2 * queues
local moved = 0

for p = 1, queues do
  local delivering, queue = KEYS[2 + moves + 2 * p - 1], KEYS[2 + moves + 2 * p]
  local items = redis.call('LRANGE', delivering, 0, -1)
  for j = 1, #items do
    redis.call('RPUSH', queue, items[j])
    moved = moved + 1
  end
  redis.call('DEL', delivering)
end

local live = {}
for i = 1, moves do
  local tag = ARGV[3 * i - 2]
  if live[tag] == nil then
    live[tag] = redis.call('HGET', KEYS[1], tag) == ARGV[3 * i - 1]
  end
end

for i = moves, 1, -1 do
  if live[ARGV[3 * i - 2]] then
    redis.call('RPUSH', KEYS[2 + i], ARGV[3 * i])
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
