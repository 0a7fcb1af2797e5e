package redis

import (
	"embed"
	"regexp"
	"strings"

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

// leaseScript is a lease script: its own body after the helpers of common.lua and
// lease.lua it uses. It takes the lease keys (keys.lease) as KEYS.
func leaseScript(name string) *goredis.Script {
	return goredis.NewScript(assemble(lua(name), "common", "lease"))
}

func plainScript(name string) *goredis.Script {
	return goredis.NewScript(assemble(lua(name), "common"))
}

// assemble returns body after the helper files: their prologues (constants, key
// names), then only the helper functions body uses, directly or through other
// helpers, in file order. Every script runs its helpers' definitions on every call,
// and a closure less is time Redis is not blocked.
func assemble(body string, files ...string) string {
	var prologue strings.Builder
	var funcs []luaFunc
	for _, f := range files {
		p, fs := parseHelpers(f, lua(f))
		prologue.WriteString(p)
		funcs = append(funcs, fs...)
	}
	// A helper can only call helpers defined before it: one backward pass finds
	// every one that is needed.
	used := code(body)
	need := make([]bool, len(funcs))
	for i := len(funcs) - 1; i >= 0; i-- {
		if regexp.MustCompile(`\b` + funcs[i].name + `\b`).MatchString(used) {
			need[i] = true
			used += code(funcs[i].text)
		}
	}
	out := prologue.String()
	for i, f := range funcs {
		if need[i] {
			out += f.text
		}
	}
	return out + body
}

// luaFunc is one top-level helper function with the comment lines before it.
type luaFunc struct{ name, text string }

var funcStart = regexp.MustCompile(`^local function ([A-Za-z_][A-Za-z0-9_]*)\(`)

// parseHelpers splits a helper file into its prologue (every line before the
// first function and its comment) and its top-level local functions, each with
// the comment lines before it. A function ends at the first line "end" in column
// 0, or on its own line when it is a one-liner; between functions there may be
// only comments and blank lines.
func parseHelpers(file, src string) (string, []luaFunc) {
	var prologue, pending strings.Builder
	var funcs []luaFunc
	var cur *luaFunc
	for _, line := range strings.SplitAfter(src, "\n") {
		trimmed := strings.TrimRight(line, "\n")
		switch {
		case cur != nil:
			cur.text += line
			if trimmed == "end" {
				funcs, cur = append(funcs, *cur), nil
			}
		case funcStart.MatchString(trimmed):
			cur = &luaFunc{name: funcStart.FindStringSubmatch(trimmed)[1], text: pending.String() + line}
			pending.Reset()
			if strings.HasSuffix(trimmed, " end") {
				funcs, cur = append(funcs, *cur), nil
			}
		case strings.HasPrefix(trimmed, "--"):
			pending.WriteString(line) // the comment of the next function, or of the prologue
		case len(funcs) == 0:
			prologue.WriteString(pending.String() + line)
			pending.Reset()
		case strings.TrimSpace(trimmed) == "":
		default:
			panic("redis: " + file + ".lua: code between helper functions: " + trimmed)
		}
	}
	if cur != nil {
		panic("redis: " + file + ".lua: function " + cur.name + " has no end")
	}
	if len(funcs) == 0 {
		prologue.WriteString(pending.String())
	}
	return prologue.String(), funcs
}

var (
	luaComment = regexp.MustCompile(`--[^\n]*`)
	luaString  = regexp.MustCompile(`'[^'\n]*'`)
)

// code is Lua source without comments and single-quoted strings, where a helper's
// name counts as a use.
func code(src string) string {
	return luaString.ReplaceAllString(luaComment.ReplaceAllString(src, ""), "''")
}

var (
	scriptInit       = leaseScript("init")
	scriptGrow       = leaseScript("grow")
	scriptReset      = leaseScript("reset")
	scriptAlloc      = leaseScript("alloc")
	scriptRenew      = leaseScript("renew")
	scriptRemove     = leaseScript("remove")
	scriptReclaim    = leaseScript("reclaim")
	scriptQuarantine = leaseScript("quarantine")
	scriptRevoke     = leaseScript("revoke")
	scriptCounts     = leaseScript("counts")
	scriptKeyCooling = leaseScript("key_cooling")
	scriptNode       = leaseScript("node")
	scriptStatus     = plainScript("status")
	scriptNow        = plainScript("now")
	scriptTryLock    = plainScript("trylock")
	scriptUnlock     = plainScript("unlock")
	scriptLocks      = plainScript("locks")
	scriptSkewRecord = plainScript("skew_record")
	scriptSkewDrop   = plainScript("skew_drop")
	scriptAPIKeyCAS  = plainScript("apikey_cas")
)
