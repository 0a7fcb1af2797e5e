-- idempotency_stats: KEYS stats; ARGV now.
-- Returns {records, bytes} of the minutes that are not over (see
-- idempotency_common.lua) and deletes the fields of those that are.
local now = clock(ARGV[1])
local current = math.floor(now / MINUTE)
local all = redis.call('HGETALL', KEYS[1])
local records, bytes, over = 0, 0, {}
for i = 1, #all, 2 do
  local kind, m = string.sub(all[i], 1, 1), tonumber(string.sub(all[i], 2))
  if m and (kind == 'r' or kind == 'b') then
    if m < current then
      over[#over + 1] = all[i]
    elseif kind == 'r' then
      records = records + tonumber(all[i + 1])
    else
      bytes = bytes + tonumber(all[i + 1])
    end
  end
end
for i = 1, #over, 1000 do
  redis.call('HDEL', KEYS[1], unpack(over, i, math.min(i + 999, #over)))
end
return {records, bytes}
