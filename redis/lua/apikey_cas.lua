-- apikey_cas: KEYS apikeys hash; ARGV key ID, expected JSON, new JSON.
-- Replaces the key's record when it still is the expected one. Returns 1 when it
-- did, 0 when the record changed meanwhile (or is gone).
if redis.call('HGET', KEYS[1], ARGV[1]) ~= ARGV[2] then
  return 0
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
return 1
