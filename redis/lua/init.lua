-- init: ARGV now, nodes, new sentinel. Returns {sentinel, fresh}.
local now = clock(ARGV[1])
local n = tonumber(ARGV[2])
local cur = redis.call('HGET', META, 'sentinel')
local stored = num(redis.call('HGET', META, 'nodes'), 0)
local fresh = 0
if not cur then
  fresh = 1
  cur = ARGV[3]
  redis.call('HSET', META, 'sentinel', cur)
  redis.call('HSETNX', META, 'fence', 0)
  redis.call('HSETNX', META, 'freeseq', 0)
elseif n < stored then
  return redis.error_reply('IDKSHRINK ' .. int(stored))
end
if n > stored then
  redis.call('HSET', META, 'nodes', int(n))
end
if fresh == 1 then
  add_nodes(0, n, now)
else
  add_nodes(stored, n, now)
end
return {cur, fresh}
