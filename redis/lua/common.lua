-- common.lua: constants and helpers of every script. assemble (scripts.go) puts
-- the constants and the helpers a script uses before its body.

-- ZERO is Go's zero time.Time{} in Unix milliseconds: the value of a time never set.
local ZERO = -62135596800000
local ZEROS = '-62135596800000'

-- int formats an integral number without exponent, for keys, members and values.
local function int(n)
  return string.format('%d', n)
end

-- clock returns now in Unix ms: the injected time when arg is set (tests), else
-- Redis TIME, the deployment's time authority.
local function clock(arg)
  if arg ~= nil and arg ~= '' then
    return tonumber(arg)
  end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
