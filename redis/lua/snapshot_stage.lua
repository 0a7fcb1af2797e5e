-- snapshot_stage: KEYS the lease keys of a load's staging (lease.lua's order);
-- ARGV now, ttl (ms), then 14 fields for each node, in NodeID order: node ID,
-- watermark, floor, quarantined until (ms), last token, restorable ('1'/'0'),
-- held ('1'/'0'), and for a held node its lease's expiresAt, renewedAt, notBefore,
-- token, grantedAt, requester key and API key ID (else ''). Writes the nodes as the
-- lease scripts keep them: a held node's lease, expiry, requester entry and key
-- count; a free node's free sequence (its ID − the staging meta's first + 1:
-- NodeID order) and its free set at
-- now. Zero times and tokens are not stored: they read back as zero. Every key is
-- made to lapse ttl from now. Returns 0, or an error reply IDKOWNER <node> when
-- the node's requester holds leases of another API key.
local now = clock(ARGV[1])
local hw, hf, hq, ht, sr, hl, ze, hs, zq, zr, zc = {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}
local holds = {}
local first = pool_first()
for i = 3, #ARGV, 14 do
  local node, wm, fl, q = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  if wm ~= ZEROS then push2(hw, node, wm) end
  if fl ~= ZEROS then push2(hf, node, fl) end
  if q ~= ZEROS then push2(hq, node, q) end
  if ARGV[i + 4] ~= '0' then push2(ht, node, ARGV[i + 4]) end
  if ARGV[i + 5] == '1' then sr[#sr + 1] = node end
  if ARGV[i + 6] == '1' then
    local exp, req, key = ARGV[i + 7], ARGV[i + 12], ARGV[i + 13]
    push2(hl, node, exp .. ',' .. ARGV[i + 8] .. ',' .. ARGV[i + 9] .. ',' .. ARGV[i + 10] .. ',' ..
      ARGV[i + 11] .. ',' .. lease_tail(req, key))
    push2(ze, exp, node)
    local held, k = requester_entry(req)
    if k and k ~= key then
      return redis.error_reply('IDKOWNER ' .. node)
    end
    held[#held + 1] = node -- nodes come in NodeID order: the entry stays ascending
    redis.call('HSET', REQS, req, table.concat(held, ',') .. ';' .. key)
    holds[key] = (holds[key] or 0) + 1
  else
    local seq = int(tonumber(node) - first + 1)
    push2(hs, node, seq)
    local w = math.max(tonumber(wm), tonumber(fl))
    if tonumber(q) > now then
      push2(zq, q, node)
    elseif w < now then
      push2(zr, seq, node)
    else
      push2(zc, int(w), node)
    end
  end
end
chunked('HSET', WM, hw)
chunked('HSET', FLOOR, hf)
chunked('HSET', QUAR, hq)
chunked('HSET', LASTTOK, ht)
chunked('SADD', RESTORABLE, sr)
chunked('HSET', LEASES, hl)
chunked('ZADD', EXPIRY, ze)
chunked('HSET', FSEQ, hs)
chunked('ZADD', QZ, zq)
chunked('ZADD', READY, zr)
chunked('ZADD', COOL, zc)
for key, n in pairs(holds) do
  redis.call('HINCRBY', KEYHELD, key, n)
end
for i = 1, #KEYS do
  redis.call('PEXPIRE', KEYS[i], ARGV[2])
end
return 0
