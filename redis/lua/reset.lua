-- reset: ARGV now, nodes, until, min fence, seen generation ID, seen generation
-- number, new generation ID, first node ID, layout, default layout. Returns {id,
-- number, origin, at, new generation}, or an error reply IDKPOOL (adopt_pool),
-- having written nothing.
local err = old_layout()
if err then return err end
local now = clock(ARGV[1])
local n = tonumber(ARGV[2])
local untl = tonumber(ARGV[3])
local first = tonumber(ARGV[8])
err = adopt_pool(first, ARGV[9], ARGV[10])
if err then return err end
if tonumber(ARGV[4]) > fence() then
  redis.call('HSET', META, 'fence', ARGV[4])
end
redis.call('HSETNX', META, 'fence', 0)
local stored = num(redis.call('HGET', META, 'nodes'), 0)
if n < stored then n = stored end
redis.call('HSET', META, 'nodes', int(n))

-- Every node is visited once, reading whole hashes and writing in bulk: the pool
-- can be large and this runs while the registry waits. Every node's floor and
-- quarantine rise to until and it becomes restorable; the free ones are filed anew.
local function hash(key)
  local t, a = {}, redis.call('HGETALL', key)
  for i = 1, #a, 2 do t[a[i]] = a[i + 1] end
  return t
end
local held = {}
for _, node in ipairs(redis.call('HKEYS', LEASES)) do held[node] = true end
local wms, fls, qs, seqs = hash(WM), hash(FLOOR), hash(QUAR), hash(FSEQ)
local nextseq = num(redis.call('HGET', META, 'freeseq'), 0)
local hf, hq, hs, sr, zq, zr, zc = {}, {}, {}, {}, {}, {}, {}
for i = first, first + n - 1 do
  local node = int(i)
  local f = num(fls[node], ZERO)
  if f < untl then
    f = untl
    push2(hf, node, int(untl))
  end
  local q = num(qs[node], ZERO)
  if q < untl then
    q = untl
    push2(hq, node, int(untl))
  end
  sr[#sr + 1] = node
  if not held[node] then
    local seq = num(seqs[node], nil)
    if not seq then
      nextseq = nextseq + 1
      seq = nextseq
      push2(hs, node, seq)
    end
    local w = math.max(num(wms[node], ZERO), f)
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
chunked('HSET', FLOOR, hf)
chunked('HSET', QUAR, hq)
chunked('HSET', FSEQ, hs)
chunked('SADD', RESTORABLE, sr)
chunked('ZADD', QZ, zq)
chunked('ZADD', READY, zr)
chunked('ZADD', COOL, zc)

local cur = redis.call('HMGET', META, 'gen', 'gen:number')
if not cur[1] or cur[1] == ARGV[5] then
  local number = math.max(num(cur[2], 0), tonumber(ARGV[6])) + 1
  redis.call('HSET', META, 'gen', ARGV[7], 'gen:number', int(number), 'gen:origin', 'recovered', 'gen:at', int(now))
  return {ARGV[7], number, 'recovered', now, 1}
end
redis.call('HSET', META, 'gen:origin', 'recovered', 'gen:at', int(now))
local g = generation()
g[5] = 0
return g
