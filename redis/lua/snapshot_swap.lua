-- snapshot_swap: KEYS the load lock, the n live durable keys (meta first), their
-- n staging keys, the sessions hash, the session seen and expiry zsets, then the
-- session sets of the users in ARGV; ARGV the load's token, n, the default
-- layout's canonical text, those user names.
-- In one step: deletes every live durable key and renames its staging key, if
-- any, into its place (without the staging key's lapse time); deletes every
-- session; releases the lock. It checks first, writing nothing when a check
-- fails: the lock is still the load's (else an error reply IDKLOADLOCK), the
-- staging meta is there (IDKNOSTAGE), the live store holds no pool or one with
-- the staging's first node ID and layout (else IDKPOOL <live first> <live size>
-- <live layout>; a live store without a stored layout is on the default one), and
-- every session's user is among ARGV (IDKSESSIONUSERS: read the sessions again).
-- Returns 1.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return redis.error_reply('IDKLOADLOCK')
end
local n = tonumber(ARGV[2])
if redis.call('EXISTS', KEYS[n + 2]) == 0 then
  return redis.error_reply('IDKNOSTAGE')
end
local live = redis.call('HMGET', KEYS[2], 'nodes', 'first', 'layout')
local staged = redis.call('HMGET', KEYS[n + 2], 'first', 'layout')
if tonumber(live[1] or '0') > 0 then
  local lf, ll = tonumber(live[2] or '0'), live[3] or ARGV[3]
  if lf ~= tonumber(staged[1] or '0') or ll ~= (staged[2] or ARGV[3]) then
    return redis.error_reply('IDKPOOL ' .. string.format('%d', lf) .. ' ' .. live[1] .. ' ' .. ll)
  end
end
local users = {}
for i = 4, #ARGV do
  users[ARGV[i]] = true
end
local sessions = 2 * n + 2
for _, rec in ipairs(redis.call('HVALS', KEYS[sessions])) do
  local ok, s = pcall(cjson.decode, rec)
  if ok and type(s) == 'table' and type(s.user) == 'string' and not users[s.user] then
    return redis.error_reply('IDKSESSIONUSERS')
  end
end
for i = 2, n + 1 do
  redis.call('UNLINK', KEYS[i])
  if redis.call('EXISTS', KEYS[n + i]) == 1 then
    redis.call('RENAME', KEYS[n + i], KEYS[i])
    redis.call('PERSIST', KEYS[i])
  end
end
for i = sessions, #KEYS do
  redis.call('UNLINK', KEYS[i])
end
redis.call('DEL', KEYS[1])
return 1
