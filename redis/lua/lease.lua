-- lease.lua: constants and helpers of the lease scripts, which assemble (scripts.go)
-- puts after common.lua's and before the script's body, keeping only the helpers
-- the script uses. KEYS always come in this order (see keys in store.go):
local META, LEASES, REQS, EXPIRY, WM, QUAR, READY, COOL, QZ, FSEQ, FLOOR, LASTTOK, RESTORABLE, KEYHELD =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10],
  KEYS[11], KEYS[12], KEYS[13], KEYS[14]
-- The lease history (doc.go): the records, their lex index, their end index.
local HIST, HIDX, HEND = KEYS[15], KEYS[16], KEYS[17]
-- The cooling charges (idkeeper.LeaseStore.Remove): a sorted set, every member
-- scored 0, '<key ID>\0<until, 16 digits>\0<node>\0<last token>', so that one
-- key's charges are one lex range in until order (cool_scan).
local KEYCOOL = KEYS[18]

-- MAXTOKEN is idkeeper.MaxFencingToken, 2^53-1: exact as a Lua number.
local MAXTOKEN = 9007199254740991

local function num(v, default)
  if v then return tonumber(v) end
  return default
end

local function fence()
  return num(redis.call('HGET', META, 'fence'), 0)
end

-- guard reads now (ARGV[5]) and checks the caller's idkeeper.Guard (ARGV[1..4]:
-- generation ID, MinFence, Now in ms or '', MaxSkew in ms) before the first write.
-- It returns now, nil and the fencing counter; or, when the guard fails, now and
-- an error reply IDKGUARD <fence> <now> <generation>, from which the Go side
-- rebuilds the error with Guard.Check.
local function guard()
  local now = clock(ARGV[5])
  local m = redis.call('HMGET', META, 'gen', 'fence')
  local gen, f = m[1] or '', num(m[2], 0)
  local bad = gen == '' or gen ~= ARGV[1] or f < tonumber(ARGV[2])
  if not bad and ARGV[3] ~= '' then
    bad = math.abs(now - tonumber(ARGV[3])) > tonumber(ARGV[4])
  end
  if bad then
    return now, redis.error_reply('IDKGUARD ' .. int(f) .. ' ' .. int(now) .. ' ' .. gen)
  end
  return now, nil, f
end

local function watermark(node)
  return num(redis.call('HGET', WM, node), ZERO)
end

local function quarantined_until(node)
  return num(redis.call('HGET', QUAR, node), ZERO)
end

-- fenced is the node's effective watermark: max(own watermark, floor).
local function fenced(node)
  return math.max(watermark(node), num(redis.call('HGET', FLOOR, node), ZERO))
end

-- A lease is stored as "expiresAt,renewedAt,notBefore,token,grantedAt,n,<requester
-- key><key ID>" (times in ms), n being the byte length of the requester key: both
-- may hold commas and anything else. The two fields a renewal changes come first,
-- so that Renew rewrites a record without decoding the rest.
local function parse_lease(node, v)
  local exp, rn, nb, tok, gr, n, rest = string.match(v, '^(%-?%d+),(%-?%d+),(%-?%d+),(%d+),(%-?%d+),(%d+),(.*)$')
  n = tonumber(n)
  return {node = node, exp = tonumber(exp), rn = tonumber(rn), nb = tonumber(nb), tok = tonumber(tok),
          gr = tonumber(gr), req = string.sub(rest, 1, n), key = string.sub(rest, n + 1)}
end

local function get_lease(node)
  local v = redis.call('HGET', LEASES, node)
  if not v then return nil end
  return parse_lease(node, v)
end

-- lease_record encodes a new lease: expiresAt, token and grantedAt are strings
-- (int), notBefore a number, tail "n,<requester key><key ID>" (lease_tail).
local function lease_record(exps, nb, toks, grs, tail)
  return exps .. ',' .. ZEROS .. ',' .. int(nb) .. ',' .. toks .. ',' .. grs .. ',' .. tail
end

local function lease_tail(req, key)
  return int(#req) .. ',' .. req .. key
end

local function push2(t, a, b)
  t[#t + 1] = a
  t[#t + 1] = b
end

-- chunked runs cmd key with args in chunks that Lua's unpack can take (an even
-- size, so pairs stay together) and returns the array replies joined.
local function chunked(cmd, key, args)
  local n = #args
  if n == 0 then return {} end
  if n <= 1000 then return redis.call(cmd, key, unpack(args)) end
  local out = {}
  for i = 1, n, 1000 do
    local r = redis.call(cmd, key, unpack(args, i, math.min(i + 999, n)))
    if type(r) == 'table' then
      for _, v in ipairs(r) do out[#out + 1] = v end
    end
  end
  return out
end

-- The lease history. A record's ID is '<node, 10 digits>:<token, 16 digits>', so
-- that IDs sort by node, then token. HIST maps it to the record. HIDX (all scores
-- 0, read by lex range) holds 't:<id>' of every record, 's:<node>:<window start -
-- ZERO, 16 digits>:<token>' of every record of a grant of the store's own, 'r:<id>'
-- of every record learned from a receipt (FromReceipt); HEND the IDs of the ended
-- records by endedAt. A record is "windowEnd,endedAt,mintedUpTo,end,notBefore,
-- grantedAt,fromReceipt,r,k,<requester key><key ID><client>" (times in ms, end ''
-- while held, fromReceipt 0 or 1, r and k the byte lengths of the requester key and
-- the key ID, client the JSON the Go side wrote, '' when none): what changes comes
-- first, so that a script rewrites a record without decoding the rest.

-- hist_id is the record ID of a grant of node (a string or a number) with token tok.
local function hist_id(node, tok)
  return string.format('%010d:%016d', tonumber(node), tok)
end

-- hist_start16 is a window start nb (ms) as it sorts in HIDX: nb - ZERO, 16
-- digits (clamped: every time of year 1 to 9999 fits).
local function hist_start16(nb)
  return string.format('%016d', math.min(math.max(nb - ZERO, 0), 9000000000000000))
end

-- hist_start is the 's:' member of record id, whose window starts at nb (ms).
local function hist_start(id, nb)
  return 's:' .. string.sub(id, 1, 11) .. hist_start16(nb) .. string.sub(id, 11)
end

-- hist_tail is the immutable tail of a new record from "r,k,".
local function hist_tail(req, key, client)
  return int(#req) .. ',' .. int(#key) .. ',' .. req .. key .. client
end

-- hist_fields splits a record into windowEnd, endedAt, mintedUpTo (numbers), end,
-- and the rest from notBefore on.
local function hist_fields(rec)
  local we, ended, minted, e, rest = string.match(rec, '^(%-?%d+),(%-?%d+),(%-?%d+),(%a*),(.*)$')
  return tonumber(we), tonumber(ended), tonumber(minted), e, rest
end

local function hist_join(we, ended, minted, e, rest)
  return int(we) .. ',' .. int(ended) .. ',' .. int(minted) .. ',' .. e .. ',' .. rest
end

-- hist_delete deletes the records of ids and their index members.
local function hist_delete(ids)
  local recs = chunked('HMGET', HIST, ids)
  local zi = {}
  for i, id in ipairs(ids) do
    zi[#zi + 1] = 't:' .. id
    if recs[i] then
      local nb, fr = string.match(recs[i], '^%-?%d+,%-?%d+,%-?%d+,%a*,(%-?%d+),%-?%d+,([01]),')
      if fr == '1' then
        zi[#zi + 1] = 'r:' .. id
      else
        zi[#zi + 1] = hist_start(id, tonumber(nb))
      end
    end
  end
  chunked('ZREM', HIDX, zi)
  chunked('ZREM', HEND, ids)
  chunked('HDEL', HIST, ids)
end

-- hist_end ends the records of ids (those that exist) with end e at now; wes and
-- minted, when set, are each record's new window end and the attested
-- mintedUpTo (Remove), a few commands for all of them.
local function hist_end(ids, e, now, wes, minted)
  if #ids == 0 then return end
  local recs = chunked('HMGET', HIST, ids)
  local hh, ze = {}, {}
  local nows = int(now)
  local tail = ',' .. nows .. ','
  if wes then minted = int(minted) end
  for i, id in ipairs(ids) do
    if recs[i] then
      local we, m, rest = string.match(recs[i], '^(%-?%d+),%-?%d+,(%-?%d+),%a*,(.*)$')
      if wes then we, m = int(wes[i]), minted end
      push2(hh, id, we .. tail .. m .. ',' .. e .. ',' .. rest)
      push2(ze, nows, id)
    end
  end
  chunked('HSET', HIST, hh)
  chunked('ZADD', HEND, ze)
end

-- hist_claim records the grant of node with token tok that a claim (window start
-- cnb, end cexp) of req and key brings: restored (held again, window end exp) when
-- exp is set, else contested (ended at now). A record of that token is reopened
-- or ended; else a new one is written, from the receipt.
local function hist_claim(node, tok, cnb, cexp, req, key, now, exp)
  local id = hist_id(node, tok)
  local rec = redis.call('HGET', HIST, id)
  local we, rest
  if rec then
    local w, _, _, _, r = hist_fields(rec)
    we, rest = w, r
  else
    we, rest = cexp, int(cnb) .. ',' .. int(now) .. ',1,' .. hist_tail(req, key, '')
    redis.call('ZADD', HIDX, 0, 't:' .. id, 0, 'r:' .. id)
  end
  if exp then
    rec = hist_join(exp, ZERO, ZERO, '', rest)
    redis.call('ZREM', HEND, id)
  else
    rec = hist_join(math.max(we, cexp), now, ZERO, 'contested', rest)
    redis.call('ZADD', HEND, int(now), id)
  end
  redis.call('HSET', HIST, id, rec)
end

-- index_leases writes the new leases of nodes (records recs, all expiring at exp,
-- in ms, exps as a string), indexes their expiry and raises each node's own
-- watermark to it, with a few commands for all of them; ws are the nodes'
-- watermarks as read.
local function index_leases(nodes, recs, exp, exps, ws)
  local hl, ze, hw = {}, {}, {}
  for i, node in ipairs(nodes) do
    push2(hl, node, recs[i])
    push2(ze, exps, node)
    if not ws[i] or exp > tonumber(ws[i]) then push2(hw, node, exps) end
  end
  chunked('HSET', LEASES, hl)
  chunked('ZADD', EXPIRY, ze)
  chunked('HSET', WM, hw)
end

-- extend_leases raises the expiry of the leases of nodes to at least exp (ms), sets
-- their renewedAt to rn (a string; nil keeps it), and raises the watermarks and
-- the window ends of their history records with them, a few commands for all of
-- them. It returns the records as they are now.
local function extend_leases(nodes, exp, rn)
  if #nodes == 0 then return {} end
  local recs = chunked('HMGET', LEASES, nodes)
  local ws = chunked('HMGET', WM, nodes)
  local exps = int(exp)
  local hl, ze, hw, ids = {}, {}, {}, {}
  for i, node in ipairs(nodes) do
    local e, r, tail = string.match(recs[i], '^(%-?%d+),(%-?%d+),(.*)$')
    local changed = rn ~= nil
    if tonumber(e) < exp then
      e, changed = exps, true
      push2(ze, exps, node)
      if exp > num(ws[i], ZERO) then push2(hw, node, exps) end
      ids[#ids + 1] = hist_id(node, tonumber(string.match(tail, '^%-?%d+,(%d+),')))
    end
    if changed then
      recs[i] = e .. ',' .. (rn or r) .. ',' .. tail
      push2(hl, node, recs[i])
    end
  end
  chunked('HSET', LEASES, hl)
  chunked('ZADD', EXPIRY, ze)
  chunked('HSET', WM, hw)
  if #ids > 0 then
    local hs, hh = chunked('HMGET', HIST, ids), {}
    for i, id in ipairs(ids) do
      if hs[i] then push2(hh, id, exps .. ',' .. string.match(hs[i], '^%-?%d+,(.*)$')) end
    end
    chunked('HSET', HIST, hh)
  end
  return recs
end

-- push_leases appends node (a string) and record of each lease to a reply.
local function push_leases(out, nodes, recs)
  for i, node in ipairs(nodes) do
    out[#out + 1] = node
    out[#out + 1] = recs[i]
  end
end

-- The requester index holds, per requester key, "<node IDs, ascending>;<key ID>":
-- the nodes it holds and the API key that owns them all (a requester's leases
-- always belong to one key: Alloc grants only to a requester that holds nothing,
-- and Renew restores only for the key that owns the rest).
local function requester_entry(req)
  local out = {}
  local v = redis.call('HGET', REQS, req)
  if not v then return out, nil end
  local list, key = string.match(v, '^([%d,]*);(.*)$')
  for n in string.gmatch(list, '%d+') do out[#out + 1] = n end
  return out, key
end

-- owned returns the node IDs (strings, ascending) the requester holds, or an error
-- reply IDKNOTOWNED when they belong to another API key.
local function owned(req, key)
  local nodes, k = requester_entry(req)
  if k and k ~= key then
    return nil, redis.error_reply('IDKNOTOWNED')
  end
  return nodes, nil
end

local function by_number(a, b) return tonumber(a) < tonumber(b) end

local function set_requester_nodes(req, nodes, key)
  if #nodes == 0 then
    redis.call('HDEL', REQS, req)
    return
  end
  table.sort(nodes, by_number)
  redis.call('HSET', REQS, req, table.concat(nodes, ',') .. ';' .. key)
end

-- drop_requester_nodes takes the nodes in set (node → true) out of the requester's
-- index entry.
local function drop_requester_nodes(req, set)
  local nodes, key = requester_entry(req)
  local keep = {}
  for _, node in ipairs(nodes) do
    if not set[node] then keep[#keep + 1] = node end
  end
  set_requester_nodes(req, keep, key)
end

-- key_held changes the count of node IDs the leases of API key hold by delta.
local function key_held(key, delta)
  if delta == 0 then return end
  if redis.call('HINCRBY', KEYHELD, key, delta) <= 0 then
    redis.call('HDEL', KEYHELD, key)
  end
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
-- (score: until), ready (score: free sequence) or cooling (score: fenced watermark).
local function place(node, seq, now)
  local q = quarantined_until(node)
  if q > now then
    redis.call('ZADD', QZ, int(q), node)
    return
  end
  local wm = fenced(node)
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

-- free_many drops the leases of nodes (strings, in the order they are freed) and
-- puts them at the back of the free order, with a few commands for all of them;
-- qs and ws are the nodes' quarantines and watermarks when the caller knows them.
-- The caller updates the requester index and the key counts.
local function free_many(nodes, now, qs, ws)
  if #nodes == 0 then return end
  chunked('HDEL', LEASES, nodes)
  chunked('ZREM', EXPIRY, nodes)
  qs = qs or chunked('HMGET', QUAR, nodes)
  ws = ws or chunked('HMGET', WM, nodes)
  local fs = chunked('HMGET', FLOOR, nodes)
  local seq = redis.call('HINCRBY', META, 'freeseq', #nodes) - #nodes
  local hs, zq, zr, zc = {}, {}, {}, {}
  for i, node in ipairs(nodes) do
    seq = seq + 1
    push2(hs, node, seq)
    local q, w = num(qs[i], ZERO), math.max(num(ws[i], ZERO), num(fs[i], ZERO))
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
-- fenced watermark passed, to where they belong at now. Only nodes that changed
-- state since the last call are touched, a few commands for all of them.
local function promote(now)
  local zr, zc = {}, {}
  local nows = int(now)
  local q = redis.call('ZRANGEBYSCORE', QZ, '-inf', nows)
  if #q > 0 then
    chunked('ZREM', QZ, q)
    local ws, fs, ss = chunked('HMGET', WM, q), chunked('HMGET', FLOOR, q), chunked('HMGET', FSEQ, q)
    for i, node in ipairs(q) do
      local w = math.max(num(ws[i], ZERO), num(fs[i], ZERO))
      if w < now then
        push2(zr, num(ss[i], 0), node)
      else
        push2(zc, int(w), node)
      end
    end
    chunked('ZADD', COOL, zc)
  end
  local c = redis.call('ZRANGEBYSCORE', COOL, '-inf', '(' .. nows)
  if #c > 0 then
    chunked('ZREM', COOL, c)
    local ss = chunked('HMGET', FSEQ, c)
    for i, node in ipairs(c) do push2(zr, num(ss[i], 0), node) end
  end
  chunked('ZADD', READY, zr)
end

-- pool_first returns the stored pool's first node ID: 0 when none is stored (a
-- store written before node ranges).
local function pool_first()
  return num(redis.call('HGET', META, 'first'), 0)
end

-- adopt_pool checks the pool asked for (first, its layout's canonical text, and
-- dflt: the default layout's, which a store without a stored layout is on)
-- against the stored one and returns nil when the store holds no pool (it then
-- stores first and layout) or one with the same first and layout; else the error
-- reply IDKPOOL <stored first> <stored size> <stored layout>, having written
-- nothing. Every script that creates or grows the pool calls it before it writes.
local function adopt_pool(first, layout, dflt)
  local stored = num(redis.call('HGET', META, 'nodes'), 0)
  if stored > 0 then
    local f = pool_first()
    local l = redis.call('HGET', META, 'layout') or dflt
    if f ~= first or l ~= layout then
      return redis.error_reply('IDKPOOL ' .. int(f) .. ' ' .. int(stored) .. ' ' .. l)
    end
    return nil
  end
  redis.call('HSET', META, 'first', int(first), 'layout', layout)
  return nil
end

-- add_nodes makes the node IDs from..to-1 that the store does not know yet free,
-- at the back of the free order; fresh says the store held no pool before.
local function add_nodes(from, to, now, fresh)
  if to <= from then return end
  local known = redis.call('HLEN', LEASES) + redis.call('HLEN', WM) + redis.call('HLEN', QUAR) +
    redis.call('HLEN', FLOOR) + redis.call('ZCARD', READY) + redis.call('ZCARD', COOL) + redis.call('ZCARD', QZ)
  if fresh and known > 0 then
    -- A store without a generation but with state left (evicted meta): keep what is known.
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

-- generation returns the stored generation as a reply: {id, number, origin, at}.
local function generation()
  local g = redis.call('HMGET', META, 'gen', 'gen:number', 'gen:origin', 'gen:at')
  return {g[1], num(g[2], 0), g[3], num(g[4], ZERO)}
end

-- old_layout returns an error reply when the keys were written by a build before
-- generations (lease records of another format): they are not read.
local function old_layout()
  if redis.call('HEXISTS', META, 'sentinel') == 1 then
    return redis.error_reply('IDKOLDLAYOUT')
  end
  return nil
end

-- cool_scan counts the node IDs charged to key for cooling at now: the members of
-- key whose until is not before now and whose node's last token is still the one
-- they name (a grant or a restore since gives it another). With prune it deletes
-- key's members that count no more.
local function cool_scan(key, now, prune)
  local p = key .. '\0'
  local lo = '[' .. p
  if not prune then lo = lo .. string.format('%016d', now) end
  local ms = redis.call('ZRANGEBYLEX', KEYCOOL, lo, '(' .. key .. '\1')
  if #ms == 0 then return 0 end
  local nodes, toks, untils = {}, {}, {}
  for i, m in ipairs(ms) do
    untils[i] = tonumber(string.sub(m, #p + 1, #p + 16))
    local rest = string.sub(m, #p + 18)
    local z = string.find(rest, '\0', 1, true)
    nodes[i], toks[i] = string.sub(rest, 1, z - 1), string.sub(rest, z + 1)
  end
  local lt = chunked('HMGET', LASTTOK, nodes)
  local n, dead = 0, {}
  for i, m in ipairs(ms) do
    if untils[i] >= now and lt[i] == toks[i] then
      n = n + 1
    else
      dead[#dead + 1] = m
    end
  end
  if prune then chunked('ZREM', KEYCOOL, dead) end
  return n
end

-- cool_charge charges key for the nodes a Remove released whose fenced watermark
-- (ws: the watermarks, fs: the floors) is not before now.
local function cool_charge(key, nodes, now, ws, fs)
  local lt = chunked('HMGET', LASTTOK, nodes)
  local zs = {}
  for i, node in ipairs(nodes) do
    local w = math.max(num(ws[i], ZERO), num(fs[i], ZERO))
    if w >= now then
      push2(zs, 0, key .. '\0' .. string.format('%016d', w) .. '\0' .. node .. '\0' .. (lt[i] or ''))
    end
  end
  chunked('ZADD', KEYCOOL, zs)
end
