-- reset: ARGV now, nodes, until, min fence, old sentinel, new sentinel.
-- Returns {sentinel, recovered}.
local now = clock(ARGV[1])
local n = tonumber(ARGV[2])
local untl = tonumber(ARGV[3])
local minfence = tonumber(ARGV[4])
local cur = redis.call('HGET', META, 'sentinel')
if minfence > fence() then
  redis.call('HSET', META, 'fence', int(minfence))
end
if cur and cur ~= ARGV[5] then
  return {cur, 0}
end
redis.call('HSET', META, 'sentinel', ARGV[6])
local stored = num(redis.call('HGET', META, 'nodes'), 0)
if n < stored then n = stored end
redis.call('HSET', META, 'nodes', int(n))

-- Every node is visited once, reading whole hashes and writing in bulk: the pool
-- can be large and this runs while the registry waits.
local function hash(key)
  local t, a = {}, redis.call('HGETALL', key)
  for i = 1, #a, 2 do t[a[i]] = a[i + 1] end
  return t
end
local held = {}
for _, node in ipairs(redis.call('HKEYS', LEASES)) do held[node] = true end
local wms, qs, seqs = hash(WM), hash(QUAR), hash(FSEQ)
local nextseq = num(redis.call('HGET', META, 'freeseq'), 0)
local hw, hq, hs, zq, zr, zc = {}, {}, {}, {}, {}, {}
for i = 0, n - 1 do
  local node = int(i)
  local w = num(wms[node], ZERO)
  if w < untl then
    w = untl
    push2(hw, node, int(untl))
  end
  local q = num(qs[node], ZERO)
  if q < untl then
    q = untl
    push2(hq, node, int(untl))
  end
  if not held[node] then
    local seq = num(seqs[node], nil)
    if not seq then
      nextseq = nextseq + 1
      seq = nextseq
      push2(hs, node, seq)
    end
    if q > now then
      push2(zq, int(q), node)
    elseif w < now then
      push2(zr, seq, node)
    else
      push2(zc, int(w), node)
    end
  end
end
redis.call('HSET', META, 'freeseq', int(nextseq))
redis.call('DEL', READY, COOL, QZ)
chunked('HSET', WM, hw)
chunked('HSET', QUAR, hq)
chunked('HSET', FSEQ, hs)
chunked('ZADD', QZ, zq)
chunked('ZADD', READY, zr)
chunked('ZADD', COOL, zc)
return {ARGV[6], 1}
