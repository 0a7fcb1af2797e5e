-- idempotency_abort: KEYS record; ARGV token.
-- Deletes the caller's in-flight marker, lapsed or not. Returns 1 when it did.
local r = redis.call('HMGET', KEYS[1], 'state', 'token')
if r[1] == 'inflight' and r[2] == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
