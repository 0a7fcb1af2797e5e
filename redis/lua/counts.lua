-- counts: ARGV now. Returns {total, remaining, leased, in grace, quarantined, now,
-- cooling, next ready at (ms; ZERO when none cool)}. O(log n + k), k being the
-- quarantines that ended but were not promoted yet: each such node is ready or
-- cooling as its fenced watermark says (promote has not moved it yet).
local now = clock(ARGV[1])
local nows = int(now)
local total = num(redis.call('HGET', META, 'nodes'), 0)
local held = redis.call('ZCARD', EXPIRY)
local ingrace = redis.call('ZCOUNT', EXPIRY, '-inf', '(' .. nows)
local q = redis.call('ZCOUNT', QZ, '(' .. nows, '+inf')
-- Cooling entries whose watermark has passed are ready at now.
local cool = redis.call('ZCOUNT', COOL, nows, '+inf')
local low = nil
if cool > 0 then
  low = tonumber(redis.call('ZRANGEBYSCORE', COOL, nows, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)[2])
end
for _, node in ipairs(redis.call('ZRANGEBYSCORE', QZ, '-inf', nows)) do
  local w = fenced(node)
  if w >= now then
    cool = cool + 1
    if low == nil or w < low then low = w end
  end
end
local nxt = ZERO
if low ~= nil then nxt = low + 1 end
return {total, total - held - q, held - ingrace, ingrace, q, now, cool, nxt}
