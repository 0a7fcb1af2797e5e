-- skew_record: KEYS index, observation key; ARGV now, requester key, JSON, ttl (ms).
-- The key lapses by PEXPIRE in Redis's time; the index, scored by now + ttl in
-- the store's time, is what SkewObservations goes by.
local now = clock(ARGV[1])
local ttl = tonumber(ARGV[4])
if ttl < 1 then
  redis.call('DEL', KEYS[2])
  redis.call('ZREM', KEYS[1], ARGV[2])
  return now
end
redis.call('SET', KEYS[2], ARGV[3], 'PX', int(ttl))
redis.call('ZADD', KEYS[1], int(now + ttl), ARGV[2])
return now
