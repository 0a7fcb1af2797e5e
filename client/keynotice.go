package client

import (
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/idkeeper/idkeeper/internal/wire"
)

// keyNoticeEvery is how often, at most, a session logs that its API key expires
// soon.
const keyNoticeEvery = 24 * time.Hour

// keyNotice logs the registry's announcement that the session's API key expires
// soon (a Warning header, wire.KeyExpiryWarning, which the registry adds to every
// answer in the key's last 14 days) at Warn level, at most once per keyNoticeEvery
// of the session's monotonic clock. A nil *keyNotice logs nothing.
type keyNotice struct {
	clk Clock
	log *slog.Logger

	mu     sync.Mutex
	logged bool
	last   time.Duration // Mono of the last log line
}

// observe looks for the announcement in the headers of one answer.
func (n *keyNotice) observe(h http.Header) {
	if n == nil {
		return
	}
	for _, v := range h.Values(wire.WarningHeader) {
		id, at, ok := wire.ParseKeyExpiryWarning(v)
		if !ok {
			continue
		}
		n.mu.Lock()
		now := n.clk.Mono()
		due := !n.logged || now-n.last >= keyNoticeEvery
		if due {
			n.logged, n.last = true, now
		}
		n.mu.Unlock()
		if due {
			n.log.Warn("the registry says this session's API key expires soon: create a new key (idkeeper apikey create) "+
				"and give it to this program before then; once it expires, renewals fail and the session ends with its lease",
				"keyId", id, "expiresAt", at, "expiresIn", at.Sub(n.clk.Now()).Round(time.Minute).String())
		}
		return
	}
}
