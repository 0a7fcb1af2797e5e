-- init: ARGV now, nodes, new generation ID. Returns {id, number, origin, at, fresh}
-- or an error reply IDKSHRINK <stored pool size>.
local err = old_layout()
if err then return err end
local now = clock(ARGV[1])
local n = tonumber(ARGV[2])
local stored = num(redis.call('HGET', META, 'nodes'), 0)
if redis.call('HEXISTS', META, 'gen') == 1 then
  if n < stored then
    return redis.error_reply('IDKSHRINK ' .. int(stored))
  end
  if n > stored then
    redis.call('HSET', META, 'nodes', int(n))
    add_nodes(stored, n, now)
  end
  local g = generation()
  g[5] = 0
  return g
end
redis.call('HSET', META, 'gen', ARGV[3], 'gen:number', 1, 'gen:origin', 'fresh', 'gen:at', int(now))
redis.call('HSETNX', META, 'fence', 0)
redis.call('HSETNX', META, 'freeseq', 0)
if n > stored then
  redis.call('HSET', META, 'nodes', int(n))
end
add_nodes(0, n, now)
return {ARGV[3], 1, 'fresh', now, 1}
