-- Trim a thread's pending list once a checkpoint is durable: that entry and every one
-- before it (older saves); later saves stay. Deletes the key when nothing is left.
-- KEYS[1]: the pending list; ARGV[1]: the checkpoint id (32 hex, each entry's prefix).
local n = redis.call('LLEN', KEYS[1])
for i = 0, n - 1 do
  local value = redis.call('LINDEX', KEYS[1], i)
  if value and string.sub(value, 1, 32) == ARGV[1] then
    if i + 1 >= n then
      redis.call('DEL', KEYS[1])
    else
      redis.call('LTRIM', KEYS[1], i + 1, -1)
    end
    return 1
  end
end
return 0
