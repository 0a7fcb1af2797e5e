-- session_prune: KEYS sessions hash, seen zset, expiry zset, then one key per
-- candidate: its user's session set (the sessions hash, never written then, for a
-- candidate the caller found no record of); ARGV seen cutoff (ms), now (ms), then
-- per candidate its ID and the record the caller read ('' for none).
-- Deletes each candidate whose record is still the one read and that still ends:
-- seenAt <= cutoff or expiresAt <= now (one touched meanwhile lives on). Index
-- entries without a record are dropped. Returns {deleted, index entries dropped}.
local cutoff, now = tonumber(ARGV[1]), tonumber(ARGV[2])
local deleted, dropped = 0, 0
for i = 4, #KEYS do
  local id, want = ARGV[2 * i - 5], ARGV[2 * i - 4]
  local rec = redis.call('HGET', KEYS[1], id)
  if not rec then
    dropped = dropped + redis.call('ZREM', KEYS[2], id) + redis.call('ZREM', KEYS[3], id)
  elseif rec == want then
    local seen = redis.call('ZSCORE', KEYS[2], id)
    local expires = redis.call('ZSCORE', KEYS[3], id)
    if (seen and tonumber(seen) <= cutoff) or (expires and tonumber(expires) <= now) then
      redis.call('HDEL', KEYS[1], id)
      redis.call('ZREM', KEYS[2], id)
      redis.call('ZREM', KEYS[3], id)
      redis.call('SREM', KEYS[i], id)
      deleted = deleted + 1
    end
  end
end
return {deleted, dropped}
