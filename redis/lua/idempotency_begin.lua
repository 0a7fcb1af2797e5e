-- idempotency_begin: KEYS record, owner zset, stats; ARGV now, fingerprint, token,
-- lock for (ms), owner, max records (0: no cap), scope.
-- A record is a hash: v (format: "2"; absent in format 1), owner and size (its
-- bytes, format 2), state ("inflight" or "completed"), fingerprint, token (of an
-- in-flight marker), created, locked (in flight only), expires (Unix ms), and once
-- completed status, header (JSON) and body. A record is live while now < expires.
-- Returns {1, now, locked} when it wrote a marker; {2, wait} when the owner holds
-- max live records (wait: ms until the earliest lapses); {3, v} for a live record
-- of a format this build does not read; else {0, state, fingerprint, created,
-- locked, expires, status, header, body} of the live record (absent fields as
-- false).
local now = clock(ARGV[1])
local r = redis.call('HMGET', KEYS[1], 'state', 'fingerprint', 'created', 'locked', 'expires', 'status', 'header', 'body', 'v')
if r[1] and r[5] and tonumber(r[5]) > now then
  if r[9] and r[9] ~= IDEM_FORMAT then
    return {3, r[9]}
  end
  return {0, r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8]}
end
sweep(KEYS[3], now)
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', int(now))
local max = tonumber(ARGV[6])
if max > 0 and redis.call('ZCARD', KEYS[2]) >= max then
  local first = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
  return {2, tonumber(first[2]) - now}
end
local lockfor = tonumber(ARGV[4])
local untl = now + lockfor
local fields = {'v', IDEM_FORMAT, 'owner', ARGV[5], 'state', 'inflight', 'fingerprint', ARGV[2], 'token', ARGV[3],
  'created', int(now), 'locked', int(untl), 'expires', int(untl)}
local size = hash_size(KEYS[1], fields)
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'size', int(size), unpack(fields))
redis.call('PEXPIRE', KEYS[1], int(lockfor))
redis.call('ZADD', KEYS[2], int(untl), ARGV[7])
keep(KEYS[2], lockfor)
tally(KEYS[3], now, untl, 1, size)
keep(KEYS[3], lockfor)
return {1, int(now), int(untl)}
