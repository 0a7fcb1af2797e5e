-- init: ARGV now, nodes, new generation ID, first node ID, layout, default layout.
-- Returns {id, number, origin, at, fresh}, or an error reply IDKSHRINK <stored
-- pool size> or IDKPOOL (adopt_pool), having written nothing.
local err = old_layout()
if err then return err end
local now = clock(ARGV[1])
local n = tonumber(ARGV[2])
local first = tonumber(ARGV[4])
local stored = num(redis.call('HGET', META, 'nodes'), 0)
err = adopt_pool(first, ARGV[5], ARGV[6])
if err then return err end
if redis.call('HEXISTS', META, 'gen') == 1 then
  if n < stored then
    return redis.error_reply('IDKSHRINK ' .. int(stored))
  end
  if n > stored then
    redis.call('HSET', META, 'nodes', int(n))
    add_nodes(first + stored, first + n, now, stored == 0)
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
add_nodes(first, first + n, now, true)
return {ARGV[3], 1, 'fresh', now, 1}
