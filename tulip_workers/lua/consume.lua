-- A leased shard queue's consume (tulip_workers.reliable_redis): its head onto its
-- delivering list, as BLMOVE would, but never blocking (a script cannot) and, behind
-- fence.lua, only by the lease's holder.
--
-- KEYS[1]  the queue's list
-- KEYS[2]  its delivering list
--
-- Returns the message moved, or false when the queue is empty.
return redis.call('LMOVE', KEYS[1], KEYS[2], 'RIGHT', 'LEFT')
