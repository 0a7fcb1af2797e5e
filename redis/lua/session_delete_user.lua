-- session_delete_user: KEYS sessions hash, seen zset, expiry zset, the user's
-- session set. Deletes every session the set names, and the set. Returns how many
-- sessions it deleted.
local n = 0
for _, id in ipairs(redis.call('SMEMBERS', KEYS[4])) do
  n = n + redis.call('HDEL', KEYS[1], id)
  redis.call('ZREM', KEYS[2], id)
  redis.call('ZREM', KEYS[3], id)
end
redis.call('DEL', KEYS[4])
return n
