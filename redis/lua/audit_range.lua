-- audit_range: KEYS seq zset, entries hash; ARGV min, max (ZRANGEBYSCORE bounds),
-- limit, '1' for newest first. Returns {seqs, records} of up to limit entries
-- (a record is nil when the index names an entry that is not there).
local seqs
if ARGV[4] == '1' then
  seqs = redis.call('ZREVRANGEBYSCORE', KEYS[1], ARGV[2], ARGV[1], 'LIMIT', 0, ARGV[3])
else
  seqs = redis.call('ZRANGEBYSCORE', KEYS[1], ARGV[1], ARGV[2], 'LIMIT', 0, ARGV[3])
end
if #seqs == 0 then
  return {seqs, {}}
end
return {seqs, redis.call('HMGET', KEYS[2], unpack(seqs))}
