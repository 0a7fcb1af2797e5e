-- snapshot_keep: KEYS the keys of a snapshot copy or of a load's staging, the
-- meta first; ARGV ttl (ms). Makes every one that exists lapse ttl from now.
-- Returns 1, or 0 (changing nothing) when the meta is gone: the copy lapsed,
-- or another load's swap took the staging keys.
if redis.call('EXISTS', KEYS[1]) == 0 then
  return 0
end
for i = 1, #KEYS do
  redis.call('PEXPIRE', KEYS[i], ARGV[1])
end
return 1
