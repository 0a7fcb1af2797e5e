-- session_delete: KEYS sessions hash, seen zset, expiry zset, the user's session
-- set; ARGV ID, the record the caller read (its user named the set). Returns 1 when
-- it deleted the session, 0 when there is none, -1 when its record is no longer
-- the one read (read again).
local cur = redis.call('HGET', KEYS[1], ARGV[1])
if not cur then
  return 0
end
if cur ~= ARGV[2] then
  return -1
end
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('SREM', KEYS[4], ARGV[1])
return 1
