-- revoke: ARGV guard (1-4), now, node, token, grace (ms).
-- Ends the lease on node whose token is token, for an operator: the lease goes,
-- the node's watermark is raised to at least its expiry (it is already), its
-- quarantine to at least expiry + grace, its restorable mark cleared, its last
-- token kept, its history record ended (revoked), and it is freed at the back of
-- the free order. Returns the lease's record (see lease.lua), or 0 when the node
-- holds no lease with that token (none, another one, or a node outside the pool).
local now, err = guard()
if err then return err end
local node, tok, grace = ARGV[6], ARGV[7], tonumber(ARGV[8])
local rec = redis.call('HGET', LEASES, node)
if not rec then return 0 end
local l = parse_lease(node, rec)
if int(l.tok) ~= tok then return 0 end
local wm = math.max(watermark(node), l.exp)
local q = math.max(quarantined_until(node), l.exp + grace)
redis.call('HSET', WM, node, int(wm))
redis.call('HSET', QUAR, node, int(q))
redis.call('SREM', RESTORABLE, node)
free_many({node}, now, {q}, {wm})
hist_end({hist_id(node, l.tok)}, 'revoked', now)
key_held(l.key, -1)
drop_requester_nodes(l.req, {[node] = true})
return rec
