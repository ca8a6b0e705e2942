-- Put what is on a leased shard queue's delivering list back at the head of the queue,
-- oldest first (behind fence.lua): a reply the holder lost, before it asks again.
--
-- KEYS[1]  the delivering list
-- KEYS[2]  the queue's list
local moved = 0
while redis.call('LMOVE', KEYS[1], KEYS[2], 'LEFT', 'RIGHT') do
  moved = moved + 1
end
return moved
