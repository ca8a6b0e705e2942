-- Delete a thread's pending state only if it is still the checkpoint just written.
-- KEYS[1]: the pending key; ARGV[1]: the checkpoint id (32 hex, the value's prefix).
local value = redis.call('GET', KEYS[1])
if value and string.sub(value, 1, 32) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
