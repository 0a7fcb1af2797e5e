-- remove: ARGV sentinel, now, requester key, minted-up-to (ms, '' when not attested).
-- Returns the number of leases released.
local err = check_sentinel(ARGV[1])
if err then return err end
local now = clock(ARGV[2])
local req, minted = ARGV[3], ARGV[4]
local nodes = requester_nodes(req)
if minted ~= '' then
  for _, node in ipairs(nodes) do
    local l = get_lease(node)
    local w = math.max(math.min(tonumber(minted), l.exp), l.nb - 1)
    local q = quarantined_until(node)
    if q > now and q > w then w = q end
    redis.call('HSET', WM, node, int(w))
  end
end
free_many(nodes, now)
redis.call('HDEL', REQS, req)
return #nodes
