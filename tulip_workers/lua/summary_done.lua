-- End a thread's pending summary job: delete its marker only while it still holds
-- this job's token (a stale or replayed job must not clear the job after it).
-- KEYS[1]: the marker; ARGV[1]: the job's token.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
