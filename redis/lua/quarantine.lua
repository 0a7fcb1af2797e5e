-- quarantine: ARGV guard (1-4), now, until, node IDs...
-- Returns 0, or an error reply IDKINVALID <node> for a node outside the pool
-- (first..first+nodes-1).
local now, err = guard()
if err then return err end
local untl = tonumber(ARGV[6])
local pool = num(redis.call('HGET', META, 'nodes'), 0)
local first = pool_first()
for i = 7, #ARGV do
  local n = tonumber(ARGV[i])
  if n == nil or n < first or n >= first + pool then
    return redis.error_reply('IDKINVALID ' .. ARGV[i])
  end
end
for i = 7, #ARGV do
  local node = ARGV[i]
  if quarantined_until(node) < untl then
    redis.call('HSET', QUAR, node, int(untl))
    if not is_held(node) then
      unfile(node)
      place(node, free_seq(node), now)
    end
  end
end
return 0
