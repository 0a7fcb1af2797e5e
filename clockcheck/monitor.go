package clockcheck

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// Limits and defaults of the Monitor.
const (
	// MinDelta and MaxDelta bound Δ, the most two replicas' clocks may differ
	// (DESIGN §8): every error bound must be ≤ Δ/2.
	MinDelta = 2 * time.Millisecond
	MaxDelta = 60 * time.Second
	// DefaultInterval is the time between two rounds.
	DefaultInterval = 5 * time.Second
	// maxSlewPPM is the fastest rate at which an NTP daemon slews a clock (the
	// Linux kernel's limit, 500 ppm): wall time falling behind monotonic time
	// faster than that, plus stepTolerance, is a step back.
	maxSlewPPM    = 500
	stepTolerance = time.Millisecond
)

// CheckDelta returns an error unless MinDelta ≤ d ≤ MaxDelta. A server calls it
// at start-up and refuses to start on the error.
func CheckDelta(d time.Duration) error {
	if d < MinDelta || d > MaxDelta {
		return fmt.Errorf("clockcheck: Δ %s is out of range: want %s to %s", d, MinDelta, MaxDelta)
	}
	return nil
}

// MonitorConfig configures a Monitor. Zero-value fields take their defaults;
// Delta is required.
type MonitorConfig struct {
	// Delta is Δ: every error bound must be ≤ Delta/2. MinDelta..MaxDelta.
	Delta time.Duration
	// Interval is the time between rounds. Default 5 s.
	Interval time.Duration
	// MaxNoGood is the longest time without a good agent sample, or (with a
	// Store) without a good store check, before the monitor fails with
	// ReasonNoGoodSample. Since every failed agent sample latches at once, it
	// matters for a stalled process and for store outages: make it longer than
	// the store's failover. Default max(6×Interval, Interval + 2×Timeout), 30 s
	// with the defaults; at least Interval + 2×Timeout (the Verifier's), else
	// NewMonitor refuses it.
	MaxNoGood time.Duration
	// Store, when set, reads the shared store's clock: storeNow is its time and
	// rtt the read's round trip as its client measured it. Each round after a
	// good agent sample s, the monitor calls it (within the Verifier's Timeout)
	// and computes the store clock's error bound
	//
	//	storeBound = |storeNow − (localMid + s.Offset)| + max(rtt, elapsed) + s.Bound
	//
	// where localMid is the local wall time (Verifier.Now) at the midpoint of
	// the call and elapsed the call's duration on the monotonic clock. A
	// storeBound over Δ/2 fails with ReasonBound when the latency cannot explain
	// it (|storeNow − (localMid + s.Offset)| − max(rtt, elapsed)/2 − s.Bound is
	// over Δ/2 too). A read error, or a read too slow to tell (a store failing
	// over), is not a clock failure: the monitor is unhealthy (ReasonIO, not
	// latched, Failure.Transient) until a check succeeds, and fails with
	// ReasonNoGoodSample after MaxNoGood of them.
	Store func(ctx context.Context) (storeNow time.Time, rtt time.Duration, err error)
	// OnFail is called once, on its own goroutine, when the monitor latches
	// (before Close).
	OnFail func(f *Failure)
	// Observe, when set, is called after every round, on the monitor's
	// goroutine (on Start's for the first round): the hook for metrics.
	Observe func(Round)
	// Logger receives a line per latched failure (error), per store read error
	// (warn) and per round (debug). Default slog.Default().
	Logger *slog.Logger
}

// Round is what one round observed.
type Round struct {
	// Sample is the agent sample; zero when it failed.
	Sample Sample
	// StoreChecked tells whether the store's clock was read and judged, and
	// StoreBound is then its error bound.
	StoreChecked bool
	StoreBound   time.Duration
	// Err is nil for a good round.
	Err *Failure
	// Latched tells whether Err latched the monitor (every Err but a store read
	// error does).
	Latched bool
}

// Status is a snapshot of a Monitor, for /readyz details and the admin.
type Status struct {
	Healthy bool
	// Err is nil while healthy: the latched failure, or why the monitor is not
	// healthy yet (not started, store clock not verified).
	Err     *Failure
	Latched bool
	Delta   time.Duration
	// Last is the last good agent sample; zero before the first.
	Last Sample
	// StoreBound is the last good store check's bound (with a Store).
	StoreBound time.Duration
	// Rounds and GoodRounds count the rounds taken, the first included.
	Rounds, GoodRounds uint64
}

// Monitor samples a clock agent periodically and judges every sample against Δ
// (DESIGN §8). The first failure of the agent exchange, of a bound or of the wall
// clock latches: the monitor stays failed until the process is restarted, since
// "the process does not turn healthy again by itself". Its methods are safe for
// concurrent use.
type Monitor struct {
	v   *Verifier
	cfg MonitorConfig
	log *slog.Logger

	mu        sync.Mutex
	started   bool
	startMono time.Time
	latched   *Failure
	failedC   chan struct{} // closed when latched
	last      Sample        // last good agent sample
	hasLast   bool
	storeOK   bool
	storeErr  *Failure  // the last store read error, until a good check
	storeMono time.Time // monotonic time of the last good store check (or of Start)
	storeBnd  time.Duration
	rounds    uint64
	good      uint64

	cancel  context.CancelFunc // ends the loop; set by Start, taken by Close
	closing chan struct{}      // closed by Close: notify gives up
	wg      sync.WaitGroup
}

// NewMonitor checks the configuration and returns a Monitor that has not
// started. It does no I/O. Errors: a nil or misconfigured Verifier, a Delta out
// of MinDelta..MaxDelta, a negative Interval, a MaxNoGood under Interval +
// 2×Timeout.
func NewMonitor(v *Verifier, cfg MonitorConfig) (*Monitor, error) {
	if v == nil {
		return nil, errors.New("clockcheck: NewMonitor needs a Verifier")
	}
	if err := v.check(); err != nil {
		return nil, err
	}
	if err := CheckDelta(cfg.Delta); err != nil {
		return nil, err
	}
	if cfg.Interval < 0 || cfg.MaxNoGood < 0 {
		return nil, errors.New("clockcheck: negative Interval or MaxNoGood")
	}
	if cfg.Interval == 0 {
		cfg.Interval = DefaultInterval
	}
	floor := cfg.Interval + 2*v.timeout()
	if cfg.MaxNoGood == 0 {
		cfg.MaxNoGood = max(6*cfg.Interval, floor)
	}
	if cfg.MaxNoGood < floor {
		return nil, fmt.Errorf("clockcheck: MaxNoGood %s is under Interval + 2×Timeout = %s", cfg.MaxNoGood, floor)
	}
	m := &Monitor{v: v, cfg: cfg, log: cfg.Logger, failedC: make(chan struct{})}
	if m.log == nil {
		m.log = slog.Default()
	}
	return m, nil
}

// Start takes the first agent sample synchronously and returns its *Failure, if
// any (the monitor is then latched): a server calls it before it listens. On
// success it samples every Interval on a goroutine until Close or ctx's end, so
// ctx must live as long as the monitor (a loop that stopped early fails with
// ReasonNoGoodSample once MaxNoGood is over). The first store check (with a
// Store) runs at once on that goroutine: until it passes, the monitor is not
// Healthy. Calling Start twice, or after Close, is an error.
func (m *Monitor) Start(ctx context.Context) error {
	m.mu.Lock()
	if m.started {
		m.mu.Unlock()
		return errors.New("clockcheck: the monitor has started already, or was closed")
	}
	m.started = true
	m.startMono = time.Now()
	m.storeMono = m.startMono
	m.closing = make(chan struct{})
	if m.cfg.OnFail != nil {
		m.wg.Add(1)
		go m.notify(m.closing)
	}
	m.mu.Unlock()

	s, f := m.sample(ctx)
	if f == nil && ctx.Err() != nil {
		f = &Failure{Reason: ReasonIO, Err: ctx.Err()}
	}
	if f != nil {
		m.latch(f)
		m.observe(Round{Err: f, Latched: true})
		return f
	}
	if m.cfg.Store == nil {
		m.observe(Round{Sample: s})
	}
	ctx, cancel := context.WithCancel(ctx)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closing == nil { // closed meanwhile
		cancel()
		return nil
	}
	m.cancel = cancel
	m.wg.Add(1)
	go m.loop(ctx, m.cfg.Store != nil, s)
	return nil
}

// Close stops sampling and waits for the goroutines, OnFail included; it may be
// called more than once. The state stays readable; a closed monitor stops being
// Healthy after MaxNoGood.
func (m *Monitor) Close() {
	m.mu.Lock()
	m.started = true // no Start after Close
	cancel, closing := m.cancel, m.closing
	m.cancel, m.closing = nil, nil
	m.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	if closing != nil {
		close(closing)
	}
	m.wg.Wait()
}

// Err returns nil while the monitor is healthy; otherwise a *Failure: the latched
// one, or why it is not healthy yet (not started: ReasonNoGoodSample; store clock
// not verified: the store read's error). Reading it also applies the checks that
// need no sample: MaxNoGood, and the wall clock against the monotonic clock since
// the last sample; either latches.
func (m *Monitor) Err() error {
	if f := m.Status().Err; f != nil {
		return f
	}
	return nil
}

// Healthy reports Err() == nil.
func (m *Monitor) Healthy() bool { return m.Err() == nil }

// Last returns the last good agent sample; zero before the first.
func (m *Monitor) Last() Sample {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.last
}

// Failed returns a channel closed when the monitor latches.
func (m *Monitor) Failed() <-chan struct{} { return m.failedC }

// Delta returns Δ.
func (m *Monitor) Delta() time.Duration { return m.cfg.Delta }

// Status returns a snapshot, applying the same checks as Err.
func (m *Monitor) Status() Status {
	m.checkIdle()
	m.mu.Lock()
	defer m.mu.Unlock()
	st := Status{Latched: m.latched != nil, Delta: m.cfg.Delta, Last: m.last, StoreBound: m.storeBnd, Rounds: m.rounds, GoodRounds: m.good}
	switch {
	case m.latched != nil:
		st.Err = m.latched
	case !m.started || !m.hasLast:
		st.Err = fail(ReasonNoGoodSample, "the clock monitor has not taken a good sample yet")
	case m.cfg.Store != nil && !m.storeOK && m.storeErr != nil:
		st.Err = m.storeErr
	case m.cfg.Store != nil && !m.storeOK:
		st.Err = fail(ReasonNoGoodSample, "the store's clock has not been verified yet")
	}
	st.Healthy = st.Err == nil
	return st
}

func (m *Monitor) loop(ctx context.Context, storeFirst bool, prev Sample) {
	defer m.wg.Done()
	if storeFirst && !m.checkStore(ctx, Round{Sample: prev}) {
		return
	}
	t := time.NewTicker(m.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !m.round(ctx) {
			return
		}
	}
}

// round takes one sample and, with a Store, checks the store. It returns false
// when the monitor has latched or ctx has ended.
func (m *Monitor) round(ctx context.Context) bool {
	if m.checkIdle() != nil {
		return false
	}
	s, f := m.sample(ctx)
	if ctx.Err() != nil {
		return false // shutting down: an interrupted exchange is no verdict on the clock
	}
	if f != nil {
		m.latch(f)
		m.observe(Round{Err: f, Latched: true})
		return false
	}
	if m.cfg.Store == nil {
		m.observe(Round{Sample: s})
		return true
	}
	return m.checkStore(ctx, Round{Sample: s})
}

// sample takes an agent sample, judges it and records it when good.
func (m *Monitor) sample(ctx context.Context) (Sample, *Failure) {
	s, err := m.v.Sample(ctx)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.rounds++
	if err != nil {
		var f *Failure
		if !errors.As(err, &f) {
			f = &Failure{Reason: ReasonIO, Err: err}
		}
		return s, f
	}
	if m.hasLast {
		if f := m.stepLocked(s.At, s.mono, s.slack); f != nil {
			return s, f
		}
	}
	if half := m.cfg.Delta / 2; s.Bound > half {
		return s, fail(ReasonBound, "the local clock's error bound %s is over Δ/2 = %s (%s)", s.Bound, half, s)
	}
	m.last, m.hasLast = s, true
	if m.cfg.Store == nil {
		m.good++
	}
	if s.Attempts > 1 {
		m.log.Info("clock sample taken after I/O failures of the exchange", "attempts", s.Attempts, "agent", m.v.Addr)
	}
	m.log.Debug("clock sample", "offset", s.Offset, "rtt", s.RTT, "uncertainty", s.Uncertainty, "bound", s.Bound, "sourceAge", s.SourceAge)
	return s, nil
}

// checkStore reads the store's clock and judges it against the round's agent
// sample. It returns false when the monitor has latched or ctx has ended.
func (m *Monitor) checkStore(ctx context.Context, r Round) bool {
	sctx, cancel := context.WithTimeout(ctx, m.v.timeout())
	start := time.Now()
	wall := start
	if m.v.Now != nil {
		wall = m.v.Now()
	}
	storeNow, rtt, err := m.cfg.Store(sctx)
	elapsed := time.Since(start)
	cancel()
	if ctx.Err() != nil {
		return false
	}
	if err != nil {
		return m.storeUnverified(r, fmt.Errorf("read the store's clock: %w", err))
	}
	localMid := wall.Add(elapsed / 2).Round(0)
	latency := max(rtt, elapsed)
	diff := storeNow.Sub(localMid.Add(r.Sample.Offset)).Abs()
	bound := satAdd(satAdd(diff, latency), r.Sample.Bound)
	if half := m.cfg.Delta / 2; bound > half {
		// The store stamped its time somewhere within the read, so the clocks
		// differ by at least diff − latency/2 − s.Bound. Only a difference the
		// read's latency cannot explain is the clocks' fault; a slow read (a
		// store failing over) proves nothing and is retried like a failed one.
		if low := diff - latency/2 - r.Sample.Bound; low <= half {
			return m.storeUnverified(r, fmt.Errorf("the store's clock read took %s (rtt %s): too slow to bound its clock within Δ/2 = %s (bound %s)",
				elapsed.Round(time.Microsecond), rtt, half, bound))
		}
		r.StoreChecked, r.StoreBound = true, bound
		r.Err, r.Latched = fail(ReasonBound, "the store clock's error bound %s is over Δ/2 = %s (store %s, local %s, offset %s)",
			bound, half, storeNow.UTC().Format(time.RFC3339Nano), localMid.UTC().Format(time.RFC3339Nano), r.Sample.Offset), true
		m.latch(r.Err)
		m.observe(r)
		return false
	}
	r.StoreChecked, r.StoreBound = true, bound
	m.mu.Lock()
	m.storeOK, m.storeErr, m.storeBnd, m.storeMono = true, nil, bound, time.Now()
	m.good++
	m.mu.Unlock()
	m.observe(r)
	return true
}

// storeUnverified records a store check that could not judge the store's clock
// (a failed or too slow read): not a clock failure, so nothing latches, but the
// monitor is unhealthy until a check succeeds. It returns false when the monitor
// has latched meanwhile (MaxNoGood).
func (m *Monitor) storeUnverified(r Round, err error) bool {
	f := &Failure{Reason: ReasonIO, Err: err, transient: true}
	m.mu.Lock()
	m.storeOK, m.storeErr = false, f
	m.mu.Unlock()
	m.log.Warn("cannot verify the store's clock: not healthy until it is verified again", "err", err)
	r.Err = f
	m.observe(r)
	return m.checkIdle() == nil
}

// checkIdle applies the checks that need no sample and latches on a failure:
// MaxNoGood since the last good agent sample or store check, and the wall clock
// against the monotonic clock since the last good sample.
func (m *Monitor) checkIdle() *Failure {
	wall, mono, slack := readClocks(m.v.Now)
	m.mu.Lock()
	if m.latched != nil || !m.started || !m.hasLast {
		f := m.latched
		m.mu.Unlock()
		return f
	}
	f := m.stepLocked(wall, mono, slack)
	if f == nil {
		if age := mono.Sub(m.last.mono); age > m.cfg.MaxNoGood {
			f = fail(ReasonNoGoodSample, "no good clock sample for %s (at most %s allowed)", age.Round(time.Millisecond), m.cfg.MaxNoGood)
		} else if age := mono.Sub(m.storeMono); m.cfg.Store != nil && age > m.cfg.MaxNoGood {
			f = fail(ReasonNoGoodSample, "the store's clock not verified for %s (at most %s allowed)", age.Round(time.Millisecond), m.cfg.MaxNoGood)
		}
	}
	m.mu.Unlock()
	if f != nil {
		m.latch(f)
	}
	return f
}

// stepLocked compares the wall time elapsed since the last good sample with the
// monotonic time elapsed: falling behind by more than a slewing clock can
// (stepTolerance + 500 ppm, plus how far apart each pair of readings may be) is
// a step back, differing by more than Δ a jump.
func (m *Monitor) stepLocked(wall, mono time.Time, slack time.Duration) *Failure {
	monoEl := mono.Sub(m.last.mono)
	wallEl := wall.Sub(m.last.At)
	d := wallEl - monoEl
	tol := stepTolerance + monoEl/(1_000_000/maxSlewPPM) + slack + m.last.slack
	switch {
	case d < -tol:
		return fail(ReasonStep, "the wall clock stepped back by %s between samples (%s of wall time in %s)", -d, wallEl, monoEl)
	case d > m.cfg.Delta:
		return fail(ReasonStep, "the wall clock jumped ahead by %s between samples, more than Δ = %s (%s of wall time in %s)", d, m.cfg.Delta, wallEl, monoEl)
	}
	return nil
}

// latch records the first failure for good, closes Failed() and calls OnFail.
func (m *Monitor) latch(f *Failure) {
	m.mu.Lock()
	if m.latched != nil {
		m.mu.Unlock()
		return
	}
	m.latched = f
	close(m.failedC)
	if m.cancel != nil {
		m.cancel()
	}
	m.mu.Unlock()
	m.log.Error("clock check failed: this process stops granting for good (its server exits, for a fresh process to verify its clock)", "reason", string(f.Reason), "err", f.Err)
}

// notify calls OnFail when the monitor latches before Close. It runs on its own
// goroutine so that OnFail never runs under a lock of whoever read Err.
func (m *Monitor) notify(closing <-chan struct{}) {
	defer m.wg.Done()
	select {
	case <-m.failedC:
	case <-closing:
		select {
		case <-m.failedC: // latched as Close began: still told
		default:
			return
		}
	}
	m.mu.Lock()
	f := m.latched
	m.mu.Unlock()
	m.cfg.OnFail(f)
}

func (m *Monitor) observe(r Round) {
	if m.cfg.Observe != nil {
		m.cfg.Observe(r)
	}
}
