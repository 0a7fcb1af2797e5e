-- session_create: KEYS sessions hash, seen zset, expiry zset, the user's session
-- set; ARGV ID, record, seenAt (ms), expiresAt (ms). Returns 1, or 0 when the ID
-- exists (nothing written).
if redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2]) == 0 then
  return 0
end
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1])
redis.call('ZADD', KEYS[3], ARGV[4], ARGV[1])
redis.call('SADD', KEYS[4], ARGV[1])
return 1
