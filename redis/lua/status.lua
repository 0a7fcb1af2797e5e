-- status: KEYS meta; ARGV now. Returns {generation ID, number, origin, at, fence,
-- pool size, now}, false for what is missing.
local now = clock(ARGV[1])
local r = redis.call('HMGET', KEYS[1], 'gen', 'gen:number', 'gen:origin', 'gen:at', 'fence', 'nodes')
return {r[1], r[2], r[3], r[4], r[5], r[6], now}
