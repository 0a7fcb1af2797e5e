-- grow: ARGV guard (1-4), now, nodes. Returns 0, or an error reply IDKSHRINK
-- <stored pool size>.
local now, err = guard()
if err then return err end
local n = tonumber(ARGV[6])
local stored = num(redis.call('HGET', META, 'nodes'), 0)
if n < stored then
  return redis.error_reply('IDKSHRINK ' .. int(stored))
end
if n > stored then
  redis.call('HSET', META, 'nodes', int(n))
  add_nodes(stored, n, now)
end
return 0
