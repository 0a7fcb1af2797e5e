-- lease.lua is prepended to every lease script, after common.lua. KEYS always
-- come in this order (see keys.go):
local META, LEASES, REQS, EXPIRY, WM, QUAR, READY, COOL, QZ, FSEQ =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10]

-- check_sentinel returns an error reply when the store's sentinel is not want;
-- it must run before the first write.
local function check_sentinel(want)
  if redis.call('HGET', META, 'sentinel') ~= want then
    return redis.error_reply('IDKRESET the store sentinel is missing or changed')
  end
  return nil
end

local function num(v, default)
  if v then return tonumber(v) end
  return default
end

local function watermark(node)
  return num(redis.call('HGET', WM, node), ZERO)
end

local function quarantined_until(node)
  return num(redis.call('HGET', QUAR, node), ZERO)
end

local function fence()
  return num(redis.call('HGET', META, 'fence'), 0)
end

-- A lease is stored as "notBefore,expiresAt,token,grantedAt,renewedAt,requester"
-- (ms), the requester key last because it may contain commas.
local function get_lease(node)
  local v = redis.call('HGET', LEASES, node)
  if not v then return nil end
  local nb, exp, tok, gr, rn, req = string.match(v, '^(%-?%d+),(%-?%d+),(%d+),(%-?%d+),(%-?%d+),(.*)$')
  return {node = node, nb = tonumber(nb), exp = tonumber(exp), tok = tonumber(tok),
          gr = tonumber(gr), rn = tonumber(rn), req = req}
end

-- put_lease writes l, indexes its expiry and raises the node's watermark to it.
local function put_lease(l)
  redis.call('HSET', LEASES, l.node,
    int(l.nb) .. ',' .. int(l.exp) .. ',' .. int(l.tok) .. ',' .. int(l.gr) .. ',' .. int(l.rn) .. ',' .. l.req)
  redis.call('ZADD', EXPIRY, int(l.exp), l.node)
  if l.exp > watermark(l.node) then
    redis.call('HSET', WM, l.node, int(l.exp))
  end
end

local function push_lease(out, l)
  out[#out + 1] = tonumber(l.node)
  out[#out + 1] = l.nb
  out[#out + 1] = l.exp
  out[#out + 1] = l.tok
  out[#out + 1] = l.gr
  out[#out + 1] = l.rn
end

-- requester_nodes returns the node IDs (strings, ascending) the requester holds.
local function requester_nodes(req)
  local out = {}
  local v = redis.call('HGET', REQS, req)
  if v then
    for n in string.gmatch(v, '%d+') do out[#out + 1] = n end
  end
  return out
end

local function by_number(a, b) return tonumber(a) < tonumber(b) end

local function set_requester_nodes(req, nodes)
  if #nodes == 0 then
    redis.call('HDEL', REQS, req)
    return
  end
  table.sort(nodes, by_number)
  redis.call('HSET', REQS, req, table.concat(nodes, ','))
end

local function next_seq(node)
  local seq = redis.call('HINCRBY', META, 'freeseq', 1)
  redis.call('HSET', FSEQ, node, seq)
  return seq
end

local function free_seq(node)
  local s = redis.call('HGET', FSEQ, node)
  if s then return tonumber(s) end
  return next_seq(node)
end

-- place files a free node under the set its state calls for at now: quarantined
-- (score: until), ready (score: free sequence) or cooling (score: watermark).
local function place(node, seq, now)
  local q = quarantined_until(node)
  if q > now then
    redis.call('ZADD', QZ, int(q), node)
    return
  end
  local wm = watermark(node)
  if wm < now then
    redis.call('ZADD', READY, seq, node)
  else
    redis.call('ZADD', COOL, int(wm), node)
  end
end

local function unfile(node)
  redis.call('ZREM', READY, node)
  redis.call('ZREM', COOL, node)
  redis.call('ZREM', QZ, node)
end

local function is_held(node)
  return redis.call('HEXISTS', LEASES, node) == 1
end

-- chunked runs cmd key with args in chunks that Lua's unpack can take (an even
-- size, so pairs stay together) and returns the array replies joined.
local function chunked(cmd, key, args)
  local out = {}
  for i = 1, #args, 1000 do
    local r = redis.call(cmd, key, unpack(args, i, math.min(i + 999, #args)))
    if type(r) == 'table' then
      for _, v in ipairs(r) do out[#out + 1] = v end
    end
  end
  return out
end

local function push2(t, a, b)
  t[#t + 1] = a
  t[#t + 1] = b
end

-- free_many drops the leases of nodes (strings, in the order they are freed) and
-- puts them at the back of the free order, with a few commands for all of them.
local function free_many(nodes, now)
  if #nodes == 0 then return end
  chunked('HDEL', LEASES, nodes)
  chunked('ZREM', EXPIRY, nodes)
  local qs = chunked('HMGET', QUAR, nodes)
  local ws = chunked('HMGET', WM, nodes)
  local seq = redis.call('HINCRBY', META, 'freeseq', #nodes) - #nodes
  local hs, zq, zr, zc = {}, {}, {}, {}
  for i, node in ipairs(nodes) do
    seq = seq + 1
    push2(hs, node, seq)
    local q, w = num(qs[i], ZERO), num(ws[i], ZERO)
    if q > now then
      push2(zq, int(q), node)
    elseif w < now then
      push2(zr, seq, node)
    else
      push2(zc, int(w), node)
    end
  end
  chunked('HSET', FSEQ, hs)
  chunked('ZADD', QZ, zq)
  chunked('ZADD', READY, zr)
  chunked('ZADD', COOL, zc)
end

-- promote moves the nodes whose quarantine ended, and the cooling nodes whose
-- watermark passed, to where they belong at now. Only nodes that changed state
-- since the last call are touched, a few commands for all of them.
local function promote(now)
  local zr, zc = {}, {}
  local q = redis.call('ZRANGEBYSCORE', QZ, '-inf', int(now))
  if #q > 0 then
    chunked('ZREM', QZ, q)
    local ws, ss = chunked('HMGET', WM, q), chunked('HMGET', FSEQ, q)
    for i, node in ipairs(q) do
      local w = num(ws[i], ZERO)
      if w < now then
        push2(zr, num(ss[i], 0), node)
      else
        push2(zc, int(w), node)
      end
    end
    chunked('ZADD', COOL, zc)
  end
  local c = redis.call('ZRANGEBYSCORE', COOL, '-inf', '(' .. int(now))
  if #c > 0 then
    chunked('ZREM', COOL, c)
    local ss = chunked('HMGET', FSEQ, c)
    for i, node in ipairs(c) do push2(zr, num(ss[i], 0), node) end
  end
  chunked('ZADD', READY, zr)
end

-- add_nodes makes the node IDs from..to-1 that the store does not know yet free,
-- at the back of the free order.
local function add_nodes(from, to, now)
  if to <= from then return end
  local known = redis.call('HLEN', LEASES) + redis.call('HLEN', WM) + redis.call('HLEN', QUAR) +
    redis.call('ZCARD', READY) + redis.call('ZCARD', COOL) + redis.call('ZCARD', QZ)
  if from == 0 and known > 0 then
    -- A store without a sentinel but with state left (evicted meta): keep what is known.
    for i = from, to - 1 do
      local node = int(i)
      if not is_held(node) and not redis.call('ZSCORE', READY, node)
          and not redis.call('ZSCORE', COOL, node) and not redis.call('ZSCORE', QZ, node) then
        place(node, next_seq(node), now)
      end
    end
    return
  end
  -- Node IDs at or past the stored pool size have never had any state: every one
  -- is ready, watermark zero.
  local last = redis.call('HINCRBY', META, 'freeseq', to - from)
  local seq = last - (to - from)
  local z, h = {}, {}
  for i = from, to - 1 do
    seq = seq + 1
    push2(z, seq, int(i))
    push2(h, int(i), seq)
  end
  chunked('ZADD', READY, z)
  chunked('HSET', FSEQ, h)
end
