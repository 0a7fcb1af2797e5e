-- session_touch: KEYS seen zset; ARGV ID, at (ms). Raises the session's seenAt to
-- at, never lowers it; a session that is not there stays absent. (ZADD XX GT,
-- without needing Redis 6.2.)
local cur = redis.call('ZSCORE', KEYS[1], ARGV[1])
if cur and tonumber(cur) < tonumber(ARGV[2]) then
  redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
end
return 0
