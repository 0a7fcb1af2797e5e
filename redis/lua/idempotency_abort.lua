-- idempotency_abort: KEYS record, owner zset, stats; ARGV now, token, owner, scope.
-- Deletes the caller's in-flight marker, lapsed or not, and its count. Returns 1
-- when it did.
local r = redis.call('HMGET', KEYS[1], 'state', 'token', 'v', 'owner', 'expires', 'size')
if r[1] ~= 'inflight' or r[2] ~= ARGV[2] or (r[3] and r[4] ~= ARGV[3]) then
  return 0
end
redis.call('DEL', KEYS[1])
if r[3] then
  redis.call('ZREM', KEYS[2], ARGV[4])
  tally(KEYS[3], clock(ARGV[1]), tonumber(r[5]), -1, -tonumber(r[6]))
end
return 1
