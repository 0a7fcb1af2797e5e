package redis

import (
	"embed"

	goredis "github.com/redis/go-redis/v9"
)

//go:embed lua/*.lua
var luaFiles embed.FS

func lua(name string) string {
	b, err := luaFiles.ReadFile("lua/" + name + ".lua")
	if err != nil {
		panic("redis: missing embedded script " + name)
	}
	return string(b)
}

// leaseScript is a lease script: common.lua and lease.lua, then its own body. It
// takes the ten lease keys (keys.lease) as KEYS.
func leaseScript(name string) *goredis.Script {
	return goredis.NewScript(lua("common") + lua("lease") + lua(name))
}

func plainScript(name string) *goredis.Script {
	return goredis.NewScript(lua("common") + lua(name))
}

var (
	scriptInit       = leaseScript("init")
	scriptReset      = leaseScript("reset")
	scriptAlloc      = leaseScript("alloc")
	scriptRenew      = leaseScript("renew")
	scriptRemove     = leaseScript("remove")
	scriptReclaim    = leaseScript("reclaim")
	scriptQuarantine = leaseScript("quarantine")
	scriptCounts     = leaseScript("counts")
	scriptNode       = leaseScript("node")
	scriptNow        = plainScript("now")
	scriptTryLock    = plainScript("trylock")
	scriptUnlock     = plainScript("unlock")
	scriptSkewRecord = plainScript("skew_record")
	scriptSkewDrop   = plainScript("skew_drop")
)
