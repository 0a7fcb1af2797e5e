-- audit_prune: KEYS entries hash, seq zset; ARGV seqs. Deletes those entries (the
-- head hash stays). Returns how many were there.
local n = 0
for i = 1, #ARGV do
  n = n + redis.call('HDEL', KEYS[1], ARGV[i])
  redis.call('ZREM', KEYS[2], ARGV[i])
end
return n
