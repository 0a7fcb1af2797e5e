-- snapshot_nodes: KEYS the lease keys of a snapshot copy (lease.lua's order);
-- ARGV first node ID, last node ID + 1. Returns, for each node ID of the range,
-- {lease record, watermark, floor, quarantined until, last token, restorable},
-- with false for what is missing; or an error reply IDKSNAPGONE when the copy's
-- meta has lapsed.
if redis.call('EXISTS', META) == 0 then
  return redis.error_reply('IDKSNAPGONE')
end
local nodes = {}
for i = tonumber(ARGV[1]), tonumber(ARGV[2]) - 1 do
  nodes[#nodes + 1] = int(i)
end
if #nodes == 0 then
  return {}
end
local ls, ws, fs = chunked('HMGET', LEASES, nodes), chunked('HMGET', WM, nodes), chunked('HMGET', FLOOR, nodes)
local qs, ts = chunked('HMGET', QUAR, nodes), chunked('HMGET', LASTTOK, nodes)
local out = {}
for i, node in ipairs(nodes) do
  out[#out + 1] = ls[i]
  out[#out + 1] = ws[i]
  out[#out + 1] = fs[i]
  out[#out + 1] = qs[i]
  out[#out + 1] = ts[i]
  out[#out + 1] = redis.call('SISMEMBER', RESTORABLE, node)
end
return out
