-- history_prune: ARGV cut (ms), limit. Deletes up to limit history records that
-- ended before cut, oldest end first (then by ID), with their index members, and
-- returns how many it deleted. Held records are not in the end index: they stay.
local ids = redis.call('ZRANGEBYSCORE', HEND, '-inf', '(' .. ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
if #ids == 0 then return 0 end
hist_delete(ids)
return #ids
