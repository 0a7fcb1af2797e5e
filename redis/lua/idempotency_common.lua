-- idempotency_common.lua: helpers of the idempotency scripts, after common.lua.
--
-- Every idempotency script but idempotency_stats takes the KEYS record hash,
-- owner zset and stats hash. A record of format 2 (field v) counts against its
-- owner: the owner's zset holds the scope of each of its records by expiry, and
-- the stats hash counts records and bytes by the minute in which they lapse, in
-- the fields r<minute> and b<minute> (minute = floor(expires / 60000)); its field
-- swept is the last minute whose fields are deleted. Records of format 1 (no v,
-- written before records were counted) count nowhere.
local IDEM_FORMAT = '2'
local MINUTE = 60000

-- hash_size is the bytes of a record as the store counts them: its key and every
-- name and value of the flat list fields.
local function hash_size(key, fields)
  local n = #key
  for i = 1, #fields do
    n = n + #fields[i]
  end
  return n
end

-- tally adds n records of size bytes that lapse at expires to the stats hash,
-- unless their minute is over: such records are out of the count already.
local function tally(stats, now, expires, n, size)
  local m = math.floor(expires / MINUTE)
  if (m + 1) * MINUTE <= now then
    return
  end
  if redis.call('HINCRBY', stats, 'r' .. int(m), n) <= 0 then
    redis.call('HDEL', stats, 'r' .. int(m), 'b' .. int(m))
  else
    redis.call('HINCRBY', stats, 'b' .. int(m), size)
  end
end

-- sweep deletes the fields of up to 64 minutes that are over, oldest first, so
-- that the stats hash holds about one pair of fields per minute of the ttl.
local function sweep(stats, now)
  local over = math.floor(now / MINUTE) - 1
  local swept = tonumber(redis.call('HGET', stats, 'swept') or '')
  if not swept or swept > over then
    redis.call('HSET', stats, 'swept', int(over))
    return
  end
  local last = math.min(over, swept + 64)
  for m = swept + 1, last do
    redis.call('HDEL', stats, 'r' .. int(m), 'b' .. int(m))
  end
  redis.call('HSET', stats, 'swept', int(last))
end

-- keep makes key live for at least ms more (relative, so a test clock is safe).
local function keep(key, ms)
  if redis.call('PTTL', key) < ms then
    redis.call('PEXPIRE', key, int(ms))
  end
end
