-- node: ARGV node ID. Returns {pool size, lease record, watermark, quarantined until}
-- with false for what is missing.
local node = ARGV[1]
return {num(redis.call('HGET', META, 'nodes'), 0), redis.call('HGET', LEASES, node),
        redis.call('HGET', WM, node), redis.call('HGET', QUAR, node)}
