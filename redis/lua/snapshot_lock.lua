-- snapshot_lock: KEYS the load lock, then (for 'keep') the load's staging keys;
-- ARGV the load's token, ttl (ms), 'keep' or 'release'. When the token still
-- holds the lock: 'keep' makes the lock and every staging key that exists lapse
-- ttl from now, together, so that while the lock is held no staging key has
-- lapsed; 'release' deletes the lock. Returns 1, or 0 (changing nothing) when the
-- token does not hold the lock.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
if ARGV[3] == 'release' then
  redis.call('DEL', KEYS[1])
  return 1
end
for i = 1, #KEYS do
  redis.call('PEXPIRE', KEYS[i], ARGV[2])
end
return 1
