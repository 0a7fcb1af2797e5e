-- status: KEYS meta; ARGV now. Returns {generation ID, number, origin, at, fence,
-- pool size, now, first node ID, layout}, false for what is missing.
local now = clock(ARGV[1])
local r = redis.call('HMGET', KEYS[1], 'gen', 'gen:number', 'gen:origin', 'gen:at', 'fence', 'nodes', 'first', 'layout')
return {r[1], r[2], r[3], r[4], r[5], r[6], now, r[7], r[8]}
