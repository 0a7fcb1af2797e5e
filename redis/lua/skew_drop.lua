-- skew_drop: KEYS index, observation keys...; ARGV now, requester keys... (one per
-- observation key). Drops each observation whose lapse time is still at or before
-- now (one recorded again meanwhile stays). Returns how many it dropped.
local now = tonumber(ARGV[1])
local dropped = 0
for i = 2, #KEYS do
  local member = ARGV[i]
  local score = redis.call('ZSCORE', KEYS[1], member)
  if score and tonumber(score) <= now then
    redis.call('ZREM', KEYS[1], member)
    redis.call('DEL', KEYS[i])
    dropped = dropped + 1
  end
end
return dropped
