-- remove: ARGV guard (1-4), now, requester key, API key ID, minted-up-to (ms, ''
-- when not attested). Returns the number of leases released, or an error reply
-- IDKNOTOWNED.
local now, err = guard()
if err then return err end
local req, key, minted = ARGV[6], ARGV[7], ARGV[8]
local nodes
nodes, err = owned(req, key)
if err then return err end
if #nodes == 0 then return 0 end
local qs, ws
if minted ~= '' then
  minted = tonumber(minted)
  local recs = chunked('HMGET', LEASES, nodes)
  qs, ws = chunked('HMGET', QUAR, nodes), {}
  local hw = {}
  for i, node in ipairs(nodes) do
    local exp, nb = string.match(recs[i], '^(%-?%d+),%-?%d+,(%-?%d+),')
    local w = math.max(math.min(minted, tonumber(exp)), tonumber(nb) - 1)
    local q = num(qs[i], ZERO)
    if q > now and q > w then w = q end
    ws[i] = w
    push2(hw, node, int(w))
  end
  chunked('HSET', WM, hw)
end
free_many(nodes, now, qs, ws)
key_held(key, -#nodes)
redis.call('HDEL', REQS, req)
return #nodes
