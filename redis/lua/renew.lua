-- renew: ARGV guard (1-4), now, requester key, API key ID, duration (ms), grace
-- (ms), then four values per claim, sorted by node: node, token, notBefore,
-- expiresAt (ms). A restore records the grant in the history (or reopens its
-- record); a contest ends the held lease's record and records the claimant's
-- grant, both contested; every renewed lease's record gets its new window end.
-- Returns {now, fence, #restored, #contested, restored..., contested..., node,
-- record, ...} (the leases' records, see lease.lua), or an error reply
-- IDKNOTOWNED.
local now, err, f = guard()
if err then return err end
local req, key, d, grace = ARGV[6], ARGV[7], tonumber(ARGV[8]), tonumber(ARGV[9])

local nodes
nodes, err = owned(req, key)
if err then return err end

local restored, contested = {}, {}
if #ARGV >= 10 then
  local pool = num(redis.call('HGET', META, 'nodes'), 0)
  local first = pool_first()
  for i = 10, #ARGV, 4 do
    local node, tok, cnb, cexp = ARGV[i], tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2]), tonumber(ARGV[i + 3])
    local id = tonumber(node)
    if id >= first and id < first + pool and cexp >= now and tok > num(redis.call('HGET', LASTTOK, node), 0) then
      local l = get_lease(node)
      if l and l.req ~= req then
        -- Held by another requester: stop both. The lease goes, the node is
        -- quarantined past both windows + grace and freed.
        local wm = math.max(watermark(node), l.exp, cexp)
        local q = math.max(quarantined_until(node), wm + grace)
        redis.call('HSET', WM, node, int(wm))
        redis.call('HSET', QUAR, node, int(q))
        redis.call('HSET', LASTTOK, node, int(tok))
        redis.call('SREM', RESTORABLE, node)
        free_many({node}, now, {q}, {wm})
        hist_end({hist_id(node, l.tok)}, 'contested', now)
        hist_claim(node, tok, cnb, cexp, req, key, now, nil)
        key_held(l.key, -1)
        drop_requester_nodes(l.req, {[node] = true})
        contested[#contested + 1] = id
      elseif not l and redis.call('SISMEMBER', RESTORABLE, node) == 1 then
        -- Free and restorable: the store forgot this grant; restore it.
        local wm = watermark(node)
        local exp = math.max(cexp, now + d)
        unfile(node)
        local exps = int(exp)
        index_leases({node}, {lease_record(exps, math.max(cnb, wm + 1), int(tok), int(now), lease_tail(req, key))},
          exp, exps, {wm})
        redis.call('HSET', LASTTOK, node, int(tok))
        redis.call('SREM', RESTORABLE, node)
        hist_claim(node, tok, cnb, cexp, req, key, now, exp)
        key_held(key, 1)
        nodes[#nodes + 1] = node
        set_requester_nodes(req, nodes, key)
        restored[#restored + 1] = id
      end
    end
  end
end

local out = {now, f, #restored, #contested}
for _, id in ipairs(restored) do out[#out + 1] = id end
for _, id in ipairs(contested) do out[#out + 1] = id end
push_leases(out, nodes, extend_leases(nodes, now + d, int(now)))
return out
