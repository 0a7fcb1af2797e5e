-- idempotency_complete: KEYS record; ARGV now, token, status, header JSON, body, ttl (ms).
-- Replaces the caller's live in-flight marker by the completed record. Returns
-- {1, expires}, or {0} when the marker is not there (lapsed, aborted, taken over).
local now = clock(ARGV[1])
local r = redis.call('HMGET', KEYS[1], 'state', 'token', 'locked')
if r[1] ~= 'inflight' or r[2] ~= ARGV[2] or not r[3] or tonumber(r[3]) <= now then
  return {0}
end
local ttl = tonumber(ARGV[6])
local expires = now + ttl
redis.call('HDEL', KEYS[1], 'token', 'locked')
redis.call('HSET', KEYS[1], 'state', 'completed', 'status', ARGV[3], 'header', ARGV[4], 'body', ARGV[5],
  'expires', int(expires))
redis.call('PEXPIRE', KEYS[1], int(ttl))
return {1, int(expires)}
