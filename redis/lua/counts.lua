-- counts: ARGV now. Returns {total, remaining, leased, in grace, quarantined, now}.
local now = clock(ARGV[1])
local total = num(redis.call('HGET', META, 'nodes'), 0)
local held = redis.call('ZCARD', EXPIRY)
local ingrace = redis.call('ZCOUNT', EXPIRY, '-inf', '(' .. int(now))
local q = redis.call('ZCOUNT', QZ, '(' .. int(now), '+inf')
return {total, total - held - q, held - ingrace, ingrace, q, now}
