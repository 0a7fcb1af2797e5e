-- idempotency_complete: KEYS record, owner zset, stats; ARGV now, token, status,
-- header JSON, body, ttl (ms), owner, scope.
-- Replaces the caller's live in-flight marker by the completed record, and moves
-- its count to the record's expiry and size. Returns {1, expires}, or {0} when the
-- marker is not there (lapsed, aborted, taken over, or another owner's).
local now = clock(ARGV[1])
local r = redis.call('HMGET', KEYS[1], 'state', 'token', 'locked', 'v', 'owner', 'expires', 'size', 'fingerprint', 'created')
if r[1] ~= 'inflight' or r[2] ~= ARGV[2] or not r[3] or tonumber(r[3]) <= now or (r[4] and r[5] ~= ARGV[7]) then
  return {0}
end
local ttl = tonumber(ARGV[6])
local expires = now + ttl
local fields = {'state', 'completed', 'status', ARGV[3], 'header', ARGV[4], 'body', ARGV[5], 'expires', int(expires)}
redis.call('HDEL', KEYS[1], 'token', 'locked')
redis.call('HSET', KEYS[1], unpack(fields))
redis.call('PEXPIRE', KEYS[1], int(ttl))
if r[4] then
  local size = hash_size(KEYS[1], fields) + hash_size('', {'v', r[4], 'owner', r[5], 'fingerprint', r[8], 'created', r[9]})
  redis.call('HSET', KEYS[1], 'size', int(size))
  sweep(KEYS[3], now)
  tally(KEYS[3], now, tonumber(r[6]), -1, -tonumber(r[7]))
  tally(KEYS[3], now, expires, 1, size)
  keep(KEYS[3], ttl)
  redis.call('ZADD', KEYS[2], int(expires), ARGV[8])
  keep(KEYS[2], ttl)
end
return {1, int(expires)}
