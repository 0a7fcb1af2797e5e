-- history_at: ARGV node ID, t (ms), limit. Returns {id, record, ...} of the history
-- records of node whose window may hold t: of the store's own grants, those among
-- the limit latest window starts at or before t ('s:' members) whose window ends
-- at or after t (their windows follow each other in token order, so the latest
-- start at or before t is the only one that can hold t; the rest is slack); of the
-- grants learned from receipts ('r:' members), whose windows may lie anywhere,
-- every one that holds t.
local node, t, limit = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local prefix = string.format('%010d:', node)
local out = {}
local starts = redis.call('ZREVRANGEBYLEX', HIDX, '(s:' .. prefix .. hist_start16(t) .. ';', '(s:' .. prefix,
  'LIMIT', 0, limit)
for _, m in ipairs(starts) do
  -- 's:' node (10) ':' start (16) ':' token (16)
  local id = string.sub(m, 3, 13) .. string.sub(m, 31)
  local rec = redis.call('HGET', HIST, id)
  if rec and tonumber(string.match(rec, '^(%-?%d+),')) >= t then push2(out, id, rec) end
end
local rcpts = redis.call('ZRANGEBYLEX', HIDX, '(r:' .. prefix, '(r:' .. string.format('%010d;', node))
for _, m in ipairs(rcpts) do
  local id = string.sub(m, 3)
  local rec = redis.call('HGET', HIST, id)
  if rec then
    local we, nb = string.match(rec, '^(%-?%d+),%-?%d+,%-?%d+,%a*,(%-?%d+),')
    if tonumber(nb) <= t and tonumber(we) >= t then push2(out, id, rec) end
  end
end
return out
