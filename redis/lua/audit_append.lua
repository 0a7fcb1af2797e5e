-- audit_append: KEYS head hash, entries hash, seq zset; ARGV seq, prev, hash,
-- record. Appends the entry when it extends the log: seq is the head's seq + 1 and
-- prev the head's hash (0 and '' when the log never had an entry). Returns 1, or 0
-- when it does not extend the log (nothing written).
local head = redis.call('HMGET', KEYS[1], 'seq', 'hash')
local seq = 0
if head[1] then
  seq = tonumber(head[1])
end
if int(seq + 1) ~= ARGV[1] or ARGV[2] ~= (head[2] or '') then
  return 0
end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[4])
redis.call('ZADD', KEYS[3], ARGV[1], ARGV[1])
redis.call('HSET', KEYS[1], 'seq', ARGV[1], 'hash', ARGV[3])
return 1
