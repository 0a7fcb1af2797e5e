-- locks: KEYS locks hash; ARGV now.
-- Returns {name, lockedAt, until, owner, …} of every lock that has not lapsed at
-- now (until > now), in no order; lapsed ones are left as they are (TryLock
-- replaces them).
local now = clock(ARGV[1])
local all = redis.call('HGETALL', KEYS[1])
local out = {}
for i = 1, #all, 2 do
  local at, untl, holder = string.match(all[i + 1], '^(%-?%d+),(%-?%d+),(.*)$')
  if not untl then
    return redis.error_reply('ERR corrupt job lock ' .. all[i])
  end
  if tonumber(untl) > now then
    out[#out + 1] = all[i]
    out[#out + 1] = tonumber(at)
    out[#out + 1] = tonumber(untl)
    out[#out + 1] = holder
  end
end
return out
