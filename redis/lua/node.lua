-- node: ARGV node ID. Returns {pool size (0 without a generation), lease record,
-- watermark, floor, quarantined until, last token, restorable, the pool's first
-- node ID} with false for what is missing.
local node = ARGV[1]
local pool = 0
if redis.call('HEXISTS', META, 'gen') == 1 then
  pool = num(redis.call('HGET', META, 'nodes'), 0)
end
return {pool, redis.call('HGET', LEASES, node), redis.call('HGET', WM, node), redis.call('HGET', FLOOR, node),
        redis.call('HGET', QUAR, node), redis.call('HGET', LASTTOK, node), redis.call('SISMEMBER', RESTORABLE, node),
        pool_first()}
