-- alloc: ARGV sentinel, now, requester key, count, first lease (ms).
-- Returns {now, fence, leases...} (six integers per lease), or an error reply
-- IDKMISMATCH <held> / IDKEXHAUSTED <remaining>.
local err = check_sentinel(ARGV[1])
if err then return err end
local now = clock(ARGV[2])
local req, count, first = ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5])
local out = {now, 0}

local held = requester_nodes(req)
if #held > 0 then
  if #held ~= count then
    return redis.error_reply('IDKMISMATCH ' .. #held)
  end
  for _, node in ipairs(held) do
    local l = get_lease(node)
    if now + first > l.exp then l.exp = now + first end
    put_lease(l)
    push_lease(out, l)
  end
  out[2] = fence()
  return out
end

promote(now)
local avail = redis.call('ZCARD', READY) + redis.call('ZCARD', COOL)
if avail < count then
  return redis.error_reply('IDKEXHAUSTED ' .. avail)
end

local picked = redis.call('ZRANGE', READY, 0, count - 1)
local need = count - #picked
if need > 0 then
  -- Cooling nodes go by lowest watermark; nodes tied on the last watermark taken
  -- go least recently freed first.
  local c = redis.call('ZRANGE', COOL, 0, need - 1, 'WITHSCORES')
  local last = c[#c]
  for i = 1, #c, 2 do
    if tonumber(c[i + 1]) < tonumber(last) then
      picked[#picked + 1] = c[i]
      need = need - 1
    end
  end
  local ties = redis.call('ZRANGEBYSCORE', COOL, last, last)
  local seq = {}
  for _, node in ipairs(ties) do seq[node] = free_seq(node) end
  table.sort(ties, function(a, b) return seq[a] < seq[b] end)
  for i = 1, need do picked[#picked + 1] = ties[i] end
end

table.sort(picked, by_number)
for _, node in ipairs(picked) do
  redis.call('ZREM', READY, node)
  redis.call('ZREM', COOL, node)
  local l = {node = node, nb = watermark(node) + 1, exp = now + first,
             tok = redis.call('HINCRBY', META, 'fence', 1), gr = now, rn = ZERO, req = req}
  put_lease(l)
  push_lease(out, l)
end
set_requester_nodes(req, picked)
out[2] = fence()
return out
