-- reclaim: ARGV sentinel, now, grace (ms), batch limit.
-- Deletes up to limit leases whose expiry + grace lies before now and returns
-- {deleted, now}; the caller repeats while a full batch was deleted.
local err = check_sentinel(ARGV[1])
if err then return err end
local now = clock(ARGV[2])
local grace, limit = tonumber(ARGV[3]), tonumber(ARGV[4])
local nodes = redis.call('ZRANGEBYSCORE', EXPIRY, '-inf', '(' .. int(now - grace), 'LIMIT', 0, limit)
table.sort(nodes, by_number)
local gone = {}
local recs = chunked('HMGET', LEASES, nodes)
for i, node in ipairs(nodes) do
  local req = string.match(recs[i], '^[^,]*,[^,]*,[^,]*,[^,]*,[^,]*,(.*)$')
  gone[req] = gone[req] or {}
  gone[req][node] = true
end
free_many(nodes, now)
for req, set in pairs(gone) do
  local keep = {}
  for _, node in ipairs(requester_nodes(req)) do
    if not set[node] then keep[#keep + 1] = node end
  end
  set_requester_nodes(req, keep)
end
return {#nodes, now}
