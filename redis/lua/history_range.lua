-- history_range: ARGV 'REV' or 'FWD', lex range of HIDX (max and min for REV, min
-- and max for FWD: within the 't:' members), limit, and 'copy' when the keys are a
-- snapshot's copy. Returns {id, record, ...} of up to limit records in the range,
-- in that order (a record missing: false); or an error reply IDKSNAPGONE when the
-- copy's meta has lapsed.
if ARGV[5] == 'copy' and redis.call('EXISTS', META) == 0 then
  return redis.error_reply('IDKSNAPGONE')
end
local ms
if ARGV[1] == 'REV' then
  ms = redis.call('ZREVRANGEBYLEX', HIDX, ARGV[2], ARGV[3], 'LIMIT', 0, tonumber(ARGV[4]))
else
  ms = redis.call('ZRANGEBYLEX', HIDX, ARGV[2], ARGV[3], 'LIMIT', 0, tonumber(ARGV[4]))
end
local out = {}
if #ms == 0 then return out end
local ids = {}
for i, m in ipairs(ms) do ids[i] = string.sub(m, 3) end
local recs = chunked('HMGET', HIST, ids)
for i, id in ipairs(ids) do push2(out, id, recs[i]) end
return out
