-- user_update: KEYS users hash; ARGV name, expected record, new record.
-- Replaces the account's record when it still is the one the caller read (whose
-- Version it checked). Returns 1 when it did, 0 when the record changed meanwhile
-- (another update came first), -1 when there is no such account.
local cur = redis.call('HGET', KEYS[1], ARGV[1])
if not cur then
  return -1
end
if cur ~= ARGV[2] then
  return 0
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
return 1
