// Command chaosclient is the client process of the fault-injection suite
// (internal/harness/chaos): it embeds the real client library, mints IDs as fast as its
// rate bound allows with one or more sessions, and records a history (see package
// internal/harness/chaos/history) that the suite's checker reads.
//
// Each session slot runs sessions one after another: Open, mint until the lease is
// lost, the hold time ends (churn) or the process is told to stop, then Close, and
// again with a new requester. A lost lease never stops the process: the slot opens
// a new session, as a service would after its OnFatal handler restarted it.
//
// SIGTERM or SIGINT closes every session (drain, Remove) and exits 0. The wall
// clock the sessions see can be skewed and stepped back (--skew, --step-period,
// --step-back); the monotonic clock is the host's.
//
// --control switches one of the library's safety mechanisms off from outside it,
// for the suite's negative controls (controls.go).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/client"
	"github.com/idkeeper/idkeeper/internal/harness/chaos/history"
	"github.com/idkeeper/idkeeper/protocol"
)

type options struct {
	server, apiKey, name, out string
	sessions, count, batch    int
	tick, progress            time.Duration
	holdMin, holdMax          time.Duration
	skew, stepPeriod, stepBy  time.Duration
	requestTimeout, minRetry  time.Duration
	backoffMin, backoffMax    time.Duration
	openTimeout, maxBackward  time.Duration
	logLevel, control         string
	twin                      bool
}

// twinStart is the start time every --twin process claims: one image's
// containers, all PID 1, started in the same 10 ms clock tick.
var twinStart = time.Date(2026, 11, 30, 6, 0, 0, 0, time.UTC)

func main() {
	var o options
	flag.StringVar(&o.server, "server", "", "registry base URL")
	flag.StringVar(&o.name, "name", "client", "name of this process in requesters and reports")
	flag.StringVar(&o.out, "out", "", "directory for history.jsonl and ids-<slot>.bin (created)")
	flag.IntVar(&o.sessions, "sessions", 1, "session slots run side by side")
	flag.IntVar(&o.count, "count", 1, "node IDs per session")
	flag.IntVar(&o.batch, "batch", 2, "IDs minted per tick and slot (the rate bound)")
	flag.DurationVar(&o.tick, "tick", time.Millisecond, "minting period")
	flag.DurationVar(&o.progress, "progress", 200*time.Millisecond, "period of progress events and ID file flushes")
	flag.DurationVar(&o.holdMin, "hold-min", 0, "churn: close a session after a random hold in hold-min..hold-max (0: hold until lost)")
	flag.DurationVar(&o.holdMax, "hold-max", 0, "see hold-min")
	flag.DurationVar(&o.skew, "skew", 0, "offset of the sessions' wall clock from the host clock")
	flag.DurationVar(&o.stepPeriod, "step-period", 0, "step the wall clock back by step-back during the second half of every period (0: never)")
	flag.DurationVar(&o.stepBy, "step-back", 0, "see step-period")
	flag.DurationVar(&o.requestTimeout, "request-timeout", 500*time.Millisecond, "client.Config.RequestTimeout")
	flag.DurationVar(&o.minRetry, "min-retry", 100*time.Millisecond, "client.Config.MinRetryInterval")
	flag.DurationVar(&o.backoffMin, "backoff-min", 100*time.Millisecond, "client.Config.BackoffInitial")
	flag.DurationVar(&o.backoffMax, "backoff-max", time.Second, "client.Config.BackoffMax")
	flag.DurationVar(&o.openTimeout, "open-timeout", 30*time.Second, "how long one Open may retry before the slot starts a new session")
	flag.DurationVar(&o.maxBackward, "max-backward-step", 0, "client.Config.MaxBackwardStep (0: the library's default)")
	flag.StringVar(&o.logLevel, "log-level", "warn", "level of the library's logs on stderr")
	flag.StringVar(&o.control, "control", "", "negative control: "+controlNoWindow+" or "+controlNoInstance+" (none by default)")
	flag.BoolVar(&o.twin, "twin", false, "every session of every --twin process claims one machine ID, PID 1 and one start time: only the library's instance tells them apart")
	flag.Parse()
	o.apiKey = os.Getenv("CHAOS_API_KEY")
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "chaosclient:", err)
		os.Exit(1)
	}
}

func run(o options) error {
	if o.server == "" || o.apiKey == "" || o.out == "" {
		return errors.New("--server, --out and $CHAOS_API_KEY are required")
	}
	if o.sessions < 1 || o.count < 1 || o.batch < 1 || o.tick <= 0 || o.holdMax < o.holdMin {
		return errors.New("bad --sessions, --count, --batch, --tick or --hold-min/--hold-max")
	}
	if err := checkControl(o.control); err != nil {
		return err
	}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	hist, err := history.Create(o.out)
	if err != nil {
		return err
	}
	defer hist.Close()
	var level slog.Level
	_ = level.UnmarshalText([]byte(o.logLevel))
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})).With("client", o.name)

	clk := newSkewClock(o.skew, o.stepPeriod, o.stepBy)
	c := &proc{o: o, hist: hist, log: log, clk: clk, started: protocol.Millis(time.Now())}
	c.record(history.Event{Ev: history.EvStart, Name: o.name, PID: os.Getpid(), Skew: clk.describe()})

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	var wg sync.WaitGroup
	errs := make(chan error, o.sessions)
	for slot := range o.sessions {
		wg.Go(func() {
			if err := c.slot(ctx, slot); err != nil {
				errs <- fmt.Errorf("slot %d: %w", slot, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	c.record(history.Event{Ev: history.EvExit})
	return nil
}

// proc is the client process: its options, history and clock.
type proc struct {
	o       options
	hist    *history.Writer
	log     *slog.Logger
	clk     *skewClock
	started time.Time
}

// record stamps e with the host clock and appends it. A history that cannot be
// written makes the run worthless: the process dies loudly.
func (c *proc) record(e history.Event) {
	e.T = time.Now().UnixNano()
	if err := c.hist.Write(e); err != nil {
		c.log.Error("write history", "err", err)
		os.Exit(3)
	}
}

// slot runs sessions one after another until ctx ends.
func (c *proc) slot(ctx context.Context, slot int) error {
	ids, err := history.CreateIDs(c.o.out, slot)
	if err != nil {
		return err
	}
	defer ids.Close()
	for gen := 1; ctx.Err() == nil; gen++ {
		if err := c.session(ctx, slot, gen, ids); err != nil {
			return err
		}
	}
	return nil
}

// session opens one session, mints with it until it ends, and closes it. Only a
// failure to write the record is returned.
func (c *proc) session(ctx context.Context, slot, gen int, ids *history.IDWriter) error {
	req := idkeeper.Requester{
		MachineID: fmt.Sprintf("chaos-%s-s%d-g%d", c.o.name, slot, gen),
		PID:       os.Getpid(),
		StartedAt: c.started,
	}
	if c.o.twin {
		req = idkeeper.Requester{MachineID: "chaos-twin-image", PID: 1, StartedAt: twinStart}
	}
	fatal := make(chan error, 1)
	var transport http.RoundTripper = http.DefaultTransport
	if c.o.control == controlNoInstance {
		transport = stripInstance{transport}
	}
	cfg := client.Config{
		ServerURL:         c.o.server,
		APIKey:            c.o.apiKey,
		Count:             c.o.count,
		HTTPClient:        &http.Client{Transport: &recorder{p: c, slot: slot, gen: gen, base: transport}},
		RequestTimeout:    c.o.requestTimeout,
		Logger:            c.log.With("slot", slot, "gen", gen),
		OnFatal:           func(err error) { fatal <- err },
		MinRetryInterval:  c.o.minRetry,
		BackoffInitial:    c.o.backoffMin,
		BackoffMax:        c.o.backoffMax,
		Requester:         req,
		Clock:             c.clk,
		MaxBackwardStep:   c.o.maxBackward,
		RenewLoopDuration: time.Minute,
	}
	s, err := client.New(cfg)
	if err != nil {
		return err
	}
	c.record(history.Event{Ev: history.EvOpen, S: slot, G: gen, Req: req.Key()})
	octx, cancel := context.WithTimeout(ctx, c.o.openTimeout)
	err = s.Open(octx)
	cancel()
	if err != nil {
		c.record(history.Event{Ev: history.EvOpenFailed, S: slot, G: gen, Err: err.Error()})
		if ctx.Err() == nil {
			// A refusal that retrying cannot fix (a 401 while a reset store has lost
			// the API key) must not turn into a hot loop.
			sleep(ctx, c.o.backoffMax)
		}
		return nil
	}
	l, held := s.Layout(), s.Requester()
	if c.o.control == controlNoInstance {
		held.Instance = "" // the requester the registry saw
	}
	c.record(history.Event{Ev: history.EvAcquired, S: slot, G: gen, Req: held.Key(), Off: ids.Off(),
		Leases: leases(s.Leases()),
		Layout: &history.Layout{EpochMs: l.EpochMillis(), TimestampBits: l.TimestampBits, NodeBits: l.NodeBits, SequenceBits: l.SequenceBits}})

	m := minting{p: c, s: s, ids: ids, slot: slot, gen: gen, buf: make([]int64, c.o.batch), mint: s.NextIDs}
	if c.o.control == controlNoWindow {
		b, err := newBareMinter(s, c.clk, c.o.maxBackward)
		if err != nil {
			return err
		}
		m.mint = b.NextIDs
	}
	end, why := m.run(ctx, fatal, c.hold())
	if err := ids.Flush(); err != nil {
		return err
	}
	d := m.digest()
	switch end {
	case endLost:
		c.record(history.Event{Ev: history.EvLost, S: slot, G: gen, Err: why, Digest: &d})
	case endFatal:
		c.record(history.Event{Ev: history.EvFatal, S: slot, G: gen, Err: why, Digest: &d})
	default:
		c.record(history.Event{Ev: history.EvClosing, S: slot, G: gen, Digest: &d})
	}
	cerr := s.Close()
	e := history.Event{Ev: history.EvClosed, S: slot, G: gen}
	if cerr != nil {
		e.Err = cerr.Error()
	}
	c.record(e)
	return nil
}

// hold is how long the next session is held before it is closed; 0: until lost.
func (c *proc) hold() time.Duration {
	if c.o.holdMax <= 0 {
		return 0
	}
	return c.o.holdMin + rand.N(c.o.holdMax-c.o.holdMin+1)
}

type end int

const (
	endStop  end = iota // ctx ended or the hold time is over: close normally
	endLost             // issuing refused the lease for good
	endFatal            // OnFatal reported the loss first
)

// minting is one session's minting loop and its digest.
type minting struct {
	p          *proc
	s          *client.Session
	mint       func(dst []int64) error // s.NextIDs, or a control's
	ids        *history.IDWriter
	slot, gen  int
	buf        []int64
	n, min     int64
	max        int64
	lastValid  int64
	refused    int64
	lastReport time.Time
}

// run mints a batch every tick until the session ends, ctx ends or hold passes.
func (m *minting) run(ctx context.Context, fatal <-chan error, hold time.Duration) (end, string) {
	tick := time.NewTicker(m.p.o.tick)
	defer tick.Stop()
	var holdC <-chan time.Time
	if hold > 0 {
		t := time.NewTimer(hold)
		defer t.Stop()
		holdC = t.C
	}
	m.lastReport = time.Now()
	for {
		select {
		case <-ctx.Done():
			return endStop, ""
		case <-holdC:
			return endStop, ""
		case err := <-fatal:
			return endFatal, err.Error()
		case <-tick.C:
		}
		start := time.Now()
		err := m.mint(m.buf)
		switch {
		case err == nil:
			if werr := m.ids.Write(m.buf); werr != nil {
				m.p.log.Error("write IDs", "err", werr)
				os.Exit(3)
			}
			m.note(m.buf)
			m.lastValid = start.UnixNano()
		case errors.Is(err, client.ErrLeaseLost), errors.Is(err, client.ErrClosed), errors.Is(err, client.ErrNotOpen):
			return endLost, err.Error()
		default:
			// A generator refusal (window not open yet or ended, clock behind): the
			// lease was valid when the call checked it.
			m.refused++
			m.lastValid = start.UnixNano()
		}
		if now := time.Now(); now.Sub(m.lastReport) >= m.p.o.progress {
			m.lastReport = now
			if err := m.ids.Flush(); err != nil {
				m.p.log.Error("flush IDs", "err", err)
				os.Exit(3)
			}
			d := m.digest()
			m.p.record(history.Event{Ev: history.EvProgress, S: m.slot, G: m.gen, Digest: &d})
		}
	}
}

func (m *minting) note(ids []int64) {
	for _, id := range ids {
		if m.n == 0 || id < m.min {
			m.min = id
		}
		if m.n == 0 || id > m.max {
			m.max = id
		}
		m.n++
	}
}

func (m *minting) digest() history.Digest {
	return history.Digest{N: m.n, Min: m.min, Max: m.max, LastValid: m.lastValid, Refused: m.refused}
}

func leases(ls []client.Lease) []history.Lease {
	out := make([]history.Lease, len(ls))
	for i, l := range ls {
		out[i] = history.Lease{Node: l.NodeID, Token: l.FencingToken, NotBefore: l.NotBefore.UnixMilli(), ExpiresAt: l.ExpiresAt.UnixMilli()}
	}
	return out
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
