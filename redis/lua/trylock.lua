-- trylock: KEYS locks hash; ARGV now, name, owner, at most for (ms).
-- A lock is stored as "lockedAt,until,owner" (ms). Returns {ok, lockedAt, until, owner}:
-- the new lock, or the one that is held.
local now = clock(ARGV[1])
local name, owner, atmost = ARGV[2], ARGV[3], tonumber(ARGV[4])
local v = redis.call('HGET', KEYS[1], name)
if v then
  local at, untl, holder = string.match(v, '^(%-?%d+),(%-?%d+),(.*)$')
  if tonumber(untl) > now then
    return {0, tonumber(at), tonumber(untl), holder}
  end
end
redis.call('HSET', KEYS[1], name, int(now) .. ',' .. int(now + atmost) .. ',' .. owner)
return {1, now, now + atmost, owner}
