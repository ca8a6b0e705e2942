-- One event onto its shard queue in one round trip (tulip_producer.direct).
-- The script is this text after a prelude defining TEMPLATE, the task's message as
-- literal text and hole names, alternately (a publish sends only the holes' values),
-- and next_seq.lua's and quota.lua's functions.
-- KEYS: [1] the key's sequence counter, [2] the event's published marker,
--       [3] the role's shard layout record, [4] the shard queue (a kombu list),
--       [5] the tenant's publish token bucket,
--       [6] (a checkpoint save) the thread's pending list (tulip_wire.pending).
-- ARGV: [1] the marker's TTL in ms, [2] the shard count the queue was chosen by,
--       [3..6] the holes' values: the event id, the delivery tag, the envelope before
--       and after its number (the queue hole is KEYS[4]), [7] the rest of the
--       envelope, [8] 0, or where the pending entry's body starts (a byte offset, from
--       1): the envelope is then [5], the number, [6], that body, [7] (the body, a
--       small patch's JSON, is sent once and escaped here), [9] 1 when [5..7] are the
--       envelope's text as it is (a small one: escaped here), 0 when they are escaped
--       as they read in the message, [10] and [11] the sending process's origin and
--       reply_to (so the script is the same for every process), [12] the counter's
--       idle TTL in ms, [13] the ordering key (the marker's value), [14] the tenant's
--       publish rate a second (0: no quota) and [15] its burst, [16] the tenant and
--       short key the task's argsrepr shows (tulip_producer.direct.who); with KEYS[6],
--       [17] the pending entry and [18] the pending list's TTL in ms.
-- Returns {seq, false}; {-1, record} when the layout record names another count (or
-- a drain): nothing was done, the caller takes the general path; {-2, ms} when the
-- tenant is over its quota (nothing was done; ms until it may publish again).
local layout = redis.call('GET', KEYS[3])
if layout and layout ~= ARGV[2] then
  return {-1, layout}
end
local wait = over_quota(KEYS[5], ARGV[14], ARGV[15])
if wait then
  return {-2, wait}
end
local seq = next_seq(KEYS[1], ARGV[12])
redis.call('SET', KEYS[2], ARGV[13], 'PX', ARGV[1])
if KEYS[6] then
  redis.call('RPUSH', KEYS[6], ARGV[17])
  redis.call('PEXPIRE', KEYS[6], ARGV[18])
end

-- JSON text as it reads in the message: a string in the task's args, which are a
-- string in the message (json.dumps(json.dumps(text)[1:-1])[1:-1] in Python), in one
-- pass; JSON text holds no control character that a JSON string must escape
local escapes = {['"'] = '\\\\\\"', ['\\'] = '\\\\\\\\'}

local function in_body(text)
  return (string.gsub(text, '["\\]', escapes))
end
local function sent(text)
  return ARGV[9] == '1' and in_body(text) or text
end

local head, tail = sent(ARGV[5]), sent(ARGV[6])
local shared = tonumber(ARGV[8])
if shared > 0 then
  tail = tail .. in_body(string.sub(ARGV[17], shared)) .. sent(ARGV[7])
end
local holes = {id = ARGV[3], queue = KEYS[4], tag = ARGV[4], head = head, tail = tail,
               seq = string.format('%d', seq), origin = ARGV[10], reply_to = ARGV[11],
               who = ARGV[16]}
local message = {}
for i = 1, #TEMPLATE do
  message[i] = (i % 2 == 1) and TEMPLATE[i] or holes[TEMPLATE[i]]
end
redis.call('LPUSH', KEYS[4], table.concat(message))
return {seq, false}
