package idkeeper

import (
	"net/netip"
	"strings"
	"sync"
	"time"
)

// The login throttle, per process (each replica counts on its own): at most
// LoginAccountFailures failed logins per account name and LoginAddressFailures per
// remote address (an IPv6 address counts by its /64) within LoginThrottleWindow
// of the first one; then every login of that name, or from that address, is
// refused until the window ends, without checking the password. A success clears
// the account's count, never the address's.
const (
	LoginAccountFailures = 5
	LoginAddressFailures = 20
	LoginThrottleWindow  = 15 * time.Minute
	// maxThrottled bounds the names and addresses remembered; past it expired ones
	// are swept, then arbitrary ones dropped.
	maxThrottled = 10000
)

// throttle counts failed logins per key ("u:" name, "a:" address) in fixed
// windows that start at a key's first failure.
type throttle struct {
	mu    sync.Mutex
	seen  map[string]*tally
	swept time.Time
}

type tally struct {
	n     int
	start time.Time
}

func limitOf(key string) int {
	if strings.HasPrefix(key, "a:") {
		return LoginAddressFailures
	}
	return LoginAccountFailures
}

// begin returns how long the first throttled key of keys stays throttled, or 0
// and counts an attempt on each (a failure until succeed or undo says otherwise),
// so concurrent attempts cannot pass the limit.
func (t *throttle) begin(now time.Time, keys ...string) time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	var wait time.Duration
	for _, k := range keys {
		if c := t.seen[k]; c != nil && c.n >= limitOf(k) && now.Before(c.start.Add(LoginThrottleWindow)) {
			wait = max(wait, c.start.Add(LoginThrottleWindow).Sub(now))
		}
	}
	if wait > 0 {
		return wait
	}
	if t.seen == nil {
		t.seen = map[string]*tally{}
	}
	for _, k := range keys {
		c := t.seen[k]
		if c == nil || !now.Before(c.start.Add(LoginThrottleWindow)) {
			t.makeRoom(now)
			c = &tally{start: now}
			t.seen[k] = c
		}
		c.n++
	}
	return 0
}

// reached reports whether the failure begin counted brought a key to its limit.
func (t *throttle) reached(keys ...string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, k := range keys {
		if c := t.seen[k]; c != nil && c.n == limitOf(k) {
			return true
		}
	}
	return false
}

// undo takes back the attempt begin counted: it was no failure.
func (t *throttle) undo(keys ...string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, k := range keys {
		if c := t.seen[k]; c != nil && c.n > 0 {
			c.n--
		}
	}
}

// succeed clears the account's count and takes back the address's attempt.
func (t *throttle) succeed(keys ...string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, k := range keys {
		if c := t.seen[k]; c != nil && strings.HasPrefix(k, "u:") {
			delete(t.seen, k)
		} else if c != nil && c.n > 0 {
			c.n--
		}
	}
}

// makeRoom keeps seen under maxThrottled: it sweeps ended windows (at most once a
// minute), then drops an arbitrary key.
func (t *throttle) makeRoom(now time.Time) {
	if len(t.seen) < maxThrottled {
		return
	}
	if now.Sub(t.swept) >= time.Minute {
		t.swept = now
		for k, c := range t.seen {
			if !now.Before(c.start.Add(LoginThrottleWindow)) {
				delete(t.seen, k)
			}
		}
	}
	for k := range t.seen {
		if len(t.seen) < maxThrottled {
			break
		}
		delete(t.seen, k)
	}
}

// addressKey is the throttle's key of a remote address: the address itself, an
// IPv6 one by its /64 (what one host usually has).
func addressKey(remote string) string {
	ip, err := netip.ParseAddr(remote)
	if err != nil {
		return cutBytes(remote, MaxAuditFieldLen)
	}
	ip = ip.Unmap()
	if ip.Is6() {
		p, _ := ip.WithZone("").Prefix(64)
		return p.String()
	}
	return ip.String()
}
