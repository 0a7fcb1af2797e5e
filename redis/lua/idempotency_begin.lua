-- idempotency_begin: KEYS record; ARGV now, fingerprint, token, lock for (ms).
-- A record is a hash: state ("inflight" or "completed"), fingerprint, token (of an
-- in-flight marker), created, locked (in flight only), expires (Unix ms), and once
-- completed status, header (JSON) and body. A record is live while now < expires.
-- Returns {1, now, locked} when it wrote a marker, else {0, state, fingerprint,
-- created, locked, expires, status, header, body} of the live record (absent
-- fields as false).
local now = clock(ARGV[1])
local r = redis.call('HMGET', KEYS[1], 'state', 'fingerprint', 'created', 'locked', 'expires', 'status', 'header', 'body')
if r[1] and r[5] and tonumber(r[5]) > now then
  return {0, r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8]}
end
local lockfor = tonumber(ARGV[4])
local untl = now + lockfor
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'state', 'inflight', 'fingerprint', ARGV[2], 'token', ARGV[3],
  'created', int(now), 'locked', int(untl), 'expires', int(untl))
redis.call('PEXPIRE', KEYS[1], int(lockfor))
return {1, int(now), int(untl)}
