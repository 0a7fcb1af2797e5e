-- key_cooling: ARGV now. Returns {key ID, count, …}: the node IDs charged to each
-- API key for cooling at now (cool_scan), keys charged with none left out.
local now = clock(ARGV[1])
local out, seen = {}, {}
for _, m in ipairs(redis.call('ZRANGE', KEYCOOL, 0, -1)) do
  local key = string.sub(m, 1, string.find(m, '\0', 1, true) - 1)
  if not seen[key] then
    seen[key] = true
    local n = cool_scan(key, now, false)
    if n > 0 then push2(out, key, n) end
  end
end
return out
