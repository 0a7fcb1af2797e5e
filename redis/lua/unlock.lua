-- unlock: KEYS locks hash; ARGV now, name, owner, at least for (ms).
-- Returns 1 when owner held the lock, else 0 and changes nothing.
local now = clock(ARGV[1])
local name, owner, atleast = ARGV[2], ARGV[3], tonumber(ARGV[4])
local v = redis.call('HGET', KEYS[1], name)
if not v then return 0 end
local at, untl, holder = string.match(v, '^(%-?%d+),(%-?%d+),(.*)$')
at, untl = tonumber(at), tonumber(untl)
if holder ~= owner or untl <= now then return 0 end
if at + atleast > now then
  redis.call('HSET', KEYS[1], name, int(at) .. ',' .. int(at + atleast) .. ',' .. holder)
else
  redis.call('HDEL', KEYS[1], name)
end
return 1
