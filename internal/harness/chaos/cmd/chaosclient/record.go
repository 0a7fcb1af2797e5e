package main

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/idkeeper/idkeeper/client"
	"github.com/idkeeper/idkeeper/internal/harness/chaos/history"
)

// recorder is the HTTP transport of one session: it records every Alloc and Renew
// answer (and the sending of every Renew) in the history, the leases of a 200 answer
// included, and passes the exchange through unchanged.
type recorder struct {
	p         *proc
	slot, gen int
	base      http.RoundTripper
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	var kind string
	switch {
	case strings.HasSuffix(req.URL.Path, "/v1/leases/renew"):
		kind = history.EvRenewAnswer
		r.p.record(history.Event{Ev: history.EvRenewSent, S: r.slot, G: r.gen})
	case strings.HasSuffix(req.URL.Path, "/v1/leases"):
		kind = history.EvAllocAnswer
	}
	resp, err := r.base.RoundTrip(req)
	if kind == "" {
		return resp, err
	}
	e := history.Event{Ev: kind, S: r.slot, G: r.gen}
	if err != nil {
		e.Err = err.Error()
		r.p.record(e)
		return resp, err
	}
	e.Status = resp.StatusCode
	body, rerr := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(body))
	switch {
	case rerr != nil:
		e.Err = "read answer: " + rerr.Error()
		// The library sees the same failure.
		resp.Body = io.NopCloser(io.MultiReader(bytes.NewReader(body), errReader{rerr}))
	case resp.StatusCode == http.StatusOK:
		e.Leases, _ = history.ParseAnswer(body)
	default:
		e.Err = string(body[:min(len(body), 300)])
	}
	r.p.record(e)
	return resp, nil
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

// skewClock is the sessions' clock: the host's monotonic clock and timers, and a
// wall clock offset from the host's by a fixed skew, stepped back by step during
// the second half of every period (and forward again at the period's end, as NTP
// would correct it).
type skewClock struct {
	sys            client.Clock
	origin         time.Time
	skew           time.Duration
	period, stepBy time.Duration
}

func newSkewClock(skew, period, step time.Duration) *skewClock {
	return &skewClock{sys: client.SystemClock(), origin: time.Now(), skew: skew, period: period, stepBy: step}
}

func (c *skewClock) Now() time.Time {
	off := c.skew
	if c.period > 0 && time.Since(c.origin)%c.period >= c.period/2 {
		off -= c.stepBy
	}
	return time.Now().Add(off).Round(0)
}

func (c *skewClock) Mono() time.Duration { return c.sys.Mono() }

func (c *skewClock) AfterFunc(d time.Duration, f func()) client.Timer { return c.sys.AfterFunc(d, f) }

func (c *skewClock) describe() *history.ClockSkew {
	if c.skew == 0 && c.period == 0 {
		return nil
	}
	return &history.ClockSkew{Offset: c.skew.Milliseconds(), Period: c.period.Milliseconds(), Step: c.stepBy.Milliseconds()}
}
