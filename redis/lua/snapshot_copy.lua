-- snapshot_copy: KEYS the live durable keys (meta first), then a copy key for
-- each; ARGV ttl (ms). Copies every durable key that exists to its copy, which
-- lapses after ttl, in this one step: the consistent view ReadSnapshot reads.
-- Returns 1, or 0 (copying nothing) when the store has no generation.
local n = #KEYS / 2
if redis.call('HEXISTS', KEYS[1], 'gen') == 0 then
  return 0
end
for i = 1, n do
  if redis.call('COPY', KEYS[i], KEYS[n + i], 'REPLACE') == 1 then
    redis.call('PEXPIRE', KEYS[n + i], ARGV[1])
  end
end
return 1
