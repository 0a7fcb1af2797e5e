-- grow: ARGV guard (1-4), now, nodes, first node ID, layout, default layout.
-- Returns 0, or an error reply IDKSHRINK <stored pool size> or IDKPOOL
-- (adopt_pool), having written nothing.
local now, err = guard()
if err then return err end
local n = tonumber(ARGV[6])
local first = tonumber(ARGV[7])
local stored = num(redis.call('HGET', META, 'nodes'), 0)
-- adopt_pool writes only to a store without a pool, which no n shrinks.
err = adopt_pool(first, ARGV[8], ARGV[9])
if err then return err end
if n < stored then
  return redis.error_reply('IDKSHRINK ' .. int(stored))
end
if n > stored then
  redis.call('HSET', META, 'nodes', int(n))
  add_nodes(first + stored, first + n, now, stored == 0)
end
return 0
