-- reclaim: ARGV guard (1-4), now, grace (ms), batch limit.
-- Deletes up to limit leases whose expiry + grace lies before now, ending their
-- history records (reclaimed), and returns {deleted, now}; the caller repeats while
-- a full batch was deleted.
local now, err = guard()
if err then return err end
local grace, limit = tonumber(ARGV[6]), tonumber(ARGV[7])
local nodes = redis.call('ZRANGEBYSCORE', EXPIRY, '-inf', '(' .. int(now - grace), 'LIMIT', 0, limit)
table.sort(nodes, by_number)
local gone, keys, ids = {}, {}, {}
local recs = chunked('HMGET', LEASES, nodes)
for i, node in ipairs(nodes) do
  local l = parse_lease(node, recs[i])
  gone[l.req] = gone[l.req] or {}
  gone[l.req][node] = true
  keys[l.key] = (keys[l.key] or 0) + 1
  ids[i] = hist_id(node, l.tok)
end
hist_end(ids, 'reclaimed', now)
free_many(nodes, now)
for k, n in pairs(keys) do key_held(k, -n) end
for req, set in pairs(gone) do drop_requester_nodes(req, set) end
return {#nodes, now}
