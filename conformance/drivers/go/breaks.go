package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idkeeper/idkeeper/client"
	"github.com/idkeeper/idkeeper/conformance/internal/leasejson"
	"github.com/idkeeper/idkeeper/internal/wire"
)

// breakTransport counts the Removes sent (the close reply's "removed") and
// implements the breaks that rewrite what the client sends or receives.
type breakTransport struct {
	brk     string
	base    http.RoundTripper
	removes atomic.Int64
}

func (t *breakTransport) wrap(base http.RoundTripper) http.RoundTripper {
	t.base = base
	return t
}

func routeOf(path string) string {
	switch {
	case strings.HasSuffix(path, "/v1/leases"):
		return "alloc"
	case strings.HasSuffix(path, "/v1/leases/renew"):
		return "renew"
	case strings.HasSuffix(path, "/v1/leases/remove"):
		return "remove"
	}
	return ""
}

func (t *breakTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	route := routeOf(req.URL.Path)
	var sentTokens int
	if req.Body != nil && route != "" {
		body, err := io.ReadAll(req.Body)
		req.Body.Close()
		if err != nil {
			return nil, err
		}
		var m map[string]any
		if json.Unmarshal(body, &m) == nil {
			if ts, ok := m["fencingTokens"].([]any); ok {
				sentTokens = len(ts)
			}
			if t.rewriteRequest(route, m) {
				body, _ = json.Marshal(m)
			}
		}
		req = req.Clone(req.Context())
		req.Body = io.NopCloser(bytes.NewReader(body))
		req.ContentLength = int64(len(body))
		req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	}
	if route == "remove" {
		t.removes.Add(1)
	}
	start := time.Now()
	resp, err := t.base.RoundTrip(req)
	if err != nil || resp.StatusCode != http.StatusOK || (route != "alloc" && route != "renew") {
		return resp, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if json.Unmarshal(body, &m) == nil {
		switch t.rewriteAnswer(route, m, sentTokens, time.Since(start)) {
		case answerRewritten:
			body, _ = json.Marshal(m)
		case answerUnavailable:
			resp.StatusCode, resp.Status = http.StatusServiceUnavailable, "503 Service Unavailable"
			resp.Header = http.Header{"Content-Type": {"application/problem+json"}}
			body = []byte(`{"type":"about:blank","title":"rewritten by the driver's break","status":503}`)
		}
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	resp.ContentLength = int64(len(body))
	resp.Header.Del("Content-Length")
	return resp, nil
}

// rewriteRequest applies the breaks on what the client sends; it reports whether
// m changed.
func (t *breakTransport) rewriteRequest(route string, m map[string]any) bool {
	switch {
	case t.brk == "reuse-instance":
		if r, ok := m["requester"].(map[string]any); ok {
			r["instance"] = "conformance-reused-instance"
			return true
		}
	case t.brk == "remove-without-minted" && route == "remove":
		delete(m, "mintedUpTo")
		return true
	case t.brk == "no-receipts" && route == "renew":
		delete(m, "receipts")
		return true
	}
	return false
}

type answerChange int

const (
	answerKept answerChange = iota
	answerRewritten
	answerUnavailable
)

// rewriteAnswer applies the breaks on a 200 answer of Alloc or Renew. rtt is the
// time from sending the request to its answer's headers.
func (t *breakTransport) rewriteAnswer(route string, m map[string]any, sentTokens int, rtt time.Duration) answerChange {
	leases, _ := m["leases"].([]any)
	switch t.brk {
	case "ignore-empty-renew":
		// The client takes the definite "holds nothing" for a passing failure.
		if route == "renew" && len(leases) == 0 {
			return answerUnavailable
		}
	case "ignore-count-mismatch":
		if route == "renew" && len(leases) > 0 && len(leases) < sentTokens {
			return answerUnavailable
		}
	case "ignore-expiry":
		// With the monotonic clock standing still (breakClock), only a lease that is
		// over on arrival would still stop the client: make it look alive.
		now, ok1 := leasejson.Time(m["serverUtcNow"])
		end, ok2 := leasejson.MinExpiry(m["leases"])
		if ok1 && ok2 && !now.Before(end) {
			m["serverUtcNow"] = wire.FormatTime(end.Add(-time.Hour))
			return answerRewritten
		}
	case "deadline-from-receive":
		// Shifting the server's now back by the round trip is the same as counting
		// the lease from the answer's arrival instead of the send time.
		if now, ok := leasejson.Time(m["serverUtcNow"]); ok {
			m["serverUtcNow"] = wire.FormatTime(now.Add(-rtt))
			return answerRewritten
		}
	case "accept-bad-layout":
		if l, ok := m["layout"].(map[string]any); ok && route == "alloc" {
			l["timestampBits"], l["nodeBits"], l["sequenceBits"] = 41, 12, 10
			return answerRewritten
		}
	}
	return answerKept
}

// breakClock is the session's clock with two breaks: ignore-expiry stops its
// monotonic face (so no lease deadline ever passes), renew-late runs every timer
// half as long again (the renew at three quarters of the lease).
type breakClock struct {
	client.Clock
	brk    string
	frozen time.Duration
}

func newBreakClock(brk string) client.Clock {
	c := &breakClock{Clock: client.SystemClock(), brk: brk}
	c.frozen = c.Clock.Mono()
	return c
}

func (c *breakClock) Mono() time.Duration {
	if c.brk == "ignore-expiry" {
		return c.frozen
	}
	return c.Clock.Mono()
}

func (c *breakClock) AfterFunc(d time.Duration, f func()) client.Timer {
	if c.brk == "renew-late" {
		d = d * 3 / 2
	}
	return c.Clock.AfterFunc(d, f)
}

// removeAnyway is the break remove-when-invalid: the Remove the client rightly did
// not send, sent by the driver with the session's requester.
func (d *driver) removeAnyway() bool {
	body, _ := json.Marshal(wire.RemoveRequest{Requester: wire.Requester{
		MachineID: d.sess.Requester().MachineID, PID: d.sess.Requester().PID,
		StartedAt: wire.FormatTime(d.sess.Requester().StartedAt), Instance: d.sess.Requester().Instance}})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.cfg.ServerURLs[0]+"/v1/leases/remove", bytes.NewReader(body))
	if err != nil {
		return false
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-API-Key", d.cfg.APIKey)
	hc := &http.Client{Transport: d.trans}
	resp, err := hc.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return true
}

// eventLog is the session's slog.Handler: it writes every record to stderr and
// turns the records that mark a protocol event into that event.
type eventLog struct {
	out  *out
	text slog.Handler
	sess *client.Session // set before Open; only its lock-free accessors are used

	mu      sync.Mutex
	renewed int
}

func (l *eventLog) renewals() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.renewed
}

func (l *eventLog) Enabled(context.Context, slog.Level) bool { return true }
func (l *eventLog) WithAttrs(as []slog.Attr) slog.Handler {
	return &attrLog{eventLog: l, attrs: as}
}
func (l *eventLog) WithGroup(string) slog.Handler { return l }

// attrLog is eventLog with attributes bound by Logger.With (not used by the client
// today; kept so that such records still reach stderr).
type attrLog struct {
	*eventLog
	attrs []slog.Attr
}

func (l *attrLog) Handle(ctx context.Context, r slog.Record) error {
	r.AddAttrs(l.attrs...)
	return l.eventLog.Handle(ctx, r)
}

func (l *eventLog) Handle(ctx context.Context, r slog.Record) error {
	attrs := map[string]slog.Value{}
	r.Attrs(func(a slog.Attr) bool {
		attrs[a.Key] = a.Value.Resolve()
		return true
	})
	switch r.Message {
	case "idkeeper client: alloc failed; retrying":
		l.out.send(map[string]any{"ev": "retry", "op": "alloc", "delayMs": attrs["retryIn"].Duration().Milliseconds()})
	case "idkeeper client: renew failed; retrying", "idkeeper client: renew refused; retrying until the lease ends":
		l.out.send(map[string]any{"ev": "retry", "op": "renew", "delayMs": attrs["retryIn"].Duration().Milliseconds()})
	case "idkeeper client: renewed":
		l.mu.Lock()
		l.renewed++
		l.mu.Unlock()
		ids := make([]int64, l.sess.NumGenerators())
		for i := range ids {
			ids[i] = l.sess.Generator(i).NodeID()
		}
		exp, _ := attrs["expiresAt"].Any().(time.Time)
		l.out.send(map[string]any{"ev": "renewed", "nodeIds": ids, "expiresAt": wire.FormatTime(exp)})
	case "idkeeper client: lease lost; issuing is blocked":
		l.out.send(map[string]any{"ev": "invalid", "reason": reasonOf(attrs["err"].String())})
	}
	return l.text.Handle(ctx, r)
}

// reasonOf names the rule behind a lost lease from the client's error text.
func reasonOf(msg string) string {
	switch {
	case strings.Contains(msg, "empty list"):
		return "empty-renew"
	case strings.Contains(msg, "answered node IDs"):
		return "count-mismatch"
	case strings.Contains(msg, "before the server's answer arrived"), strings.Contains(msg, "already past by the local clock"):
		return "expired-on-arrival"
	case strings.Contains(msg, "expired on the local monotonic clock"):
		return "expired"
	}
	return "lease-lost"
}
