-- remove: ARGV guard (1-4), now, requester key, API key ID, minted-up-to (ms, ''
-- when not attested). Ends the leases' history records (removed); with
-- minted-up-to, each record's window ends at what the holder attested (within its
-- lease's window) and the node's watermark is lowered to it, but not below a
-- quarantine still running. The nodes left cooling are charged to the API key
-- (cool_charge), whose charges that count no more go. Returns the number of
-- leases released, or an error reply IDKNOTOWNED.
local now, err = guard()
if err then return err end
local req, key, minted = ARGV[6], ARGV[7], ARGV[8]
local nodes
nodes, err = owned(req, key)
if err then return err end
if #nodes == 0 then return 0 end
local recs = chunked('HMGET', LEASES, nodes)
local ids, qs, ws, wes = {}, nil, nil, nil
if minted ~= '' then
  minted = tonumber(minted)
  qs, ws, wes = chunked('HMGET', QUAR, nodes), {}, {}
end
local hw = {}
for i, node in ipairs(nodes) do
  local exp, nb, tok = string.match(recs[i], '^(%-?%d+),%-?%d+,(%-?%d+),(%d+),')
  ids[i] = hist_id(node, tonumber(tok))
  if wes then
    local w = math.max(math.min(minted, tonumber(exp)), tonumber(nb) - 1)
    wes[i] = w
    local q = num(qs[i], ZERO)
    if q > now and q > w then w = q end
    ws[i] = w
    push2(hw, node, int(w))
  end
end
chunked('HSET', WM, hw)
hist_end(ids, 'removed', now, wes, minted)
local fws = ws or chunked('HMGET', WM, nodes)
free_many(nodes, now, qs, ws)
cool_charge(key, nodes, now, fws, chunked('HMGET', FLOOR, nodes))
cool_scan(key, now, true)
key_held(key, -#nodes)
redis.call('HDEL', REQS, req)
return #nodes
