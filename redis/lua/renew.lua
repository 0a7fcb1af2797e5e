-- renew: ARGV sentinel, now, requester key, duration (ms).
-- Returns {now, fence, leases...} (six integers per lease).
local err = check_sentinel(ARGV[1])
if err then return err end
local now = clock(ARGV[2])
local req, d = ARGV[3], tonumber(ARGV[4])
local out = {now, fence()}
for _, node in ipairs(requester_nodes(req)) do
  local l = get_lease(node)
  if now + d > l.exp then l.exp = now + d end
  l.rn = now
  put_lease(l)
  push_lease(out, l)
end
return out
