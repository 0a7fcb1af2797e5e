-- alloc: ARGV guard (1-4), now, requester key, API key ID, count, first lease (ms),
-- max nodes (0: no quota), client (the JSON of the history records, '' when none).
-- A new grant adds a history record per lease; a repeat raises their window ends.
-- Returns {now, fence, node, record, ...} (the leases' records, see lease.lua), or
-- an error reply IDKNOTOWNED / IDKMISMATCH <held> / IDKQUOTA <held> <cooling> /
-- IDKEXHAUSTED <remaining> / IDKFENCEMAX <fence>.
local now, err, f = guard()
if err then return err end
local req, key, count, first = ARGV[6], ARGV[7], tonumber(ARGV[8]), tonumber(ARGV[9])
local out = {now, f}

local held
held, err = owned(req, key)
if err then return err end
if #held > 0 then
  if #held ~= count then
    return redis.error_reply('IDKMISMATCH ' .. #held)
  end
  push_leases(out, held, extend_leases(held, now + first, nil))
  return out
end

if ARGV[10] ~= '0' then
  local maxnodes = tonumber(ARGV[10])
  local cool = cool_scan(key, now, false)
  local kh = num(redis.call('HGET', KEYHELD, key), 0) + cool
  if kh + count > maxnodes then
    return redis.error_reply('IDKQUOTA ' .. int(kh) .. ' ' .. int(cool))
  end
end
promote(now)
local picked = redis.call('ZRANGE', READY, 0, count - 1)
local ready = #picked
if ready < count then
  local avail = ready + redis.call('ZCARD', COOL)
  if avail < count then
    return redis.error_reply('IDKEXHAUSTED ' .. avail)
  end
end
if f + count > MAXTOKEN then
  return redis.error_reply('IDKFENCEMAX ' .. int(f))
end

chunked('ZREM', READY, picked)
local need = count - ready
if need > 0 then
  -- Cooling nodes go by lowest fenced watermark; nodes tied on the last watermark
  -- taken go least recently freed first.
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
  local cooled = {}
  for i = ready + 1, #picked do cooled[#cooled + 1] = picked[i] end
  chunked('ZREM', COOL, cooled)
end

table.sort(picked, by_number)
local ws, fs = chunked('HMGET', WM, picked), chunked('HMGET', FLOOR, picked)
local exp, tail = now + first, lease_tail(req, key)
local exps, nows = int(exp), int(now)
local recs, toks = {}, {}
local htail = ',' .. nows .. ',0,' .. hist_tail(req, key, ARGV[11])
local hh, zi, ids = {}, {}, {}
for i, node in ipairs(picked) do
  local tok = int(f + i)
  local nb = math.max(num(ws[i], ZERO), num(fs[i], ZERO)) + 1
  recs[i] = lease_record(exps, nb, tok, nows, tail)
  push2(toks, node, tok)
  ids[i] = hist_id(node, f + i)
  push2(hh, ids[i], exps .. ',' .. ZEROS .. ',' .. ZEROS .. ',,' .. int(nb) .. htail)
  push2(zi, 0, 't:' .. ids[i])
  push2(zi, 0, hist_start(ids[i], nb))
end
local added = 0
for i = 1, #hh, 1000 do
  added = added + redis.call('HSET', HIST, unpack(hh, i, math.min(i + 999, #hh)))
end
if added < count then
  -- A record of the same token existed: one learned from a claim of a token the
  -- store had not handed out yet (the store's own tokens are never handed out
  -- twice). The grant's record replaced it; its 'r:' and end index members go.
  local zr = {}
  for i, id in ipairs(ids) do zr[i] = 'r:' .. id end
  chunked('ZREM', HIDX, zr)
  chunked('ZREM', HEND, ids)
end
chunked('ZADD', HIDX, zi)
redis.call('HSET', META, 'fence', int(f + count))
index_leases(picked, recs, exp, exps, ws)
chunked('HSET', LASTTOK, toks)
chunked('SREM', RESTORABLE, picked)
key_held(key, count)
set_requester_nodes(req, picked, key)
out[2] = f + count
push_leases(out, picked, recs)
return out
