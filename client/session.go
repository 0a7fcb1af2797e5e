package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idkeeper/idkeeper/protocol"
	"github.com/idkeeper/idkeeper/snowflake"
)

// notHeld is the deadline while no lease is held: every monotonic reading is past it.
const notHeld = math.MinInt64

// closedBit marks the issuing gate closed; the bits below it count in-flight calls.
const closedBit = 1 << 62

// reason boxes the error issuing returns once it is refused for good.
type reason struct{ err error }

// closedReason is the halt reason Close sets; compared by identity.
var closedReason = &reason{ErrClosed}

type state int

const (
	stateNew     state = iota // New returned it; Open not called
	stateOpening              // Open is running
	stateOpen                 // a lease is held (it may have run out locally)
	stateEnded                // closed, lease lost, or Open failed: for good
)

// Session holds the leases of Config.Count node IDs and mints IDs with them
// (DESIGN §4). Create it with New and Open (or Start), mint with NextID, NextIDs or
// a pinned Generator, and end it with Close. All methods are safe for concurrent
// use.
//
// Lifecycle: Open allocates (retrying with backoff), validates the grant, renews at
// once, then renews at half the lease in the background. The lease is valid until
// a deadline on the monotonic clock: the send time of the last successful request
// plus the lease time the server granted (expiresAt − serverUtcNow). Issuing checks
// that deadline on every call, so it stops the moment the lease ends even if no
// goroutine gets to run. A lost lease ends the session: issuing is blocked, Done is
// closed, Err tells why, and Config.OnFatal is called. A session never gets a lease
// again; a program that wants to go on creates a new one.
type Session struct {
	cfg  Config
	clk  Clock
	log  *slog.Logger
	api  api
	gens []*Generator // one per node ID, created by New, filled by Open

	// The issuing path reads only these atomics.
	gate     atomic.Int64           // closedBit | in-flight issuing calls
	deadline atomic.Int64           // monotonic ns; issuing allowed while Mono() < deadline
	halt     atomic.Pointer[reason] // why issuing is refused for good, once it is
	rr       atomic.Uint64          // round-robin position

	drained   chan struct{}
	drainOnce sync.Once

	ctx    context.Context // cancelled by Close and when the lease is lost
	cancel context.CancelFunc

	renewMu sync.Mutex     // serialises renews
	opening sync.WaitGroup // Open in progress

	mu          sync.Mutex
	state       state
	opened      bool // Open has returned nil: losses go to OnFatal from then on
	closing     bool
	requester   protocol.Requester
	layout      snowflake.Layout
	leases      []Lease
	renewTimer  Timer
	expiryTimer Timer

	cooled sync.Map // coolingKey → struct{}: the leases noteCooling logged

	jitterDraw func() float64 // the backoff's uniform draw in [0, 1); nil: math/rand/v2

	// Node IDs on demand (Config.MaxCount): nil when off. pool holds the
	// generators issuing spreads over: gens, then the extra sessions'.
	dem  *demand
	pool atomic.Pointer[[]*Generator]

	endOnce sync.Once
	err     error // why the session ended; read after done is closed
	done    chan struct{}
}

// New checks cfg and returns a Session that holds no lease yet: issuing returns
// ErrNotOpen and Healthy is false until Open succeeds. It does no I/O.
func New(cfg Config) (*Session, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Session{
		cfg: cfg,
		clk: cfg.Clock,
		log: cfg.Logger,
		api: api{reps: newReplicas(cfg.ServerURLs, cfg.Logger), key: cfg.APIKey, hc: noRedirects(cfg.HTTPClient), timeout: cfg.RequestTimeout,
			client: clientOf(cfg)},
		ctx:     ctx,
		cancel:  cancel,
		drained: make(chan struct{}),
		done:    make(chan struct{}),
	}
	s.api.notice = &keyNotice{clk: cfg.Clock, log: cfg.Logger}
	s.deadline.Store(notHeld)
	s.gens = make([]*Generator, cfg.Count)
	for i := range s.gens {
		s.gens[i] = &Generator{s: s}
	}
	if s.dem = newDemand(cfg); s.dem != nil {
		all := slices.Clone(s.gens)
		s.pool.Store(&all)
	}
	return s, nil
}

// Start is New followed by Open. On failure it returns the error of either and no
// Session.
func Start(ctx context.Context, cfg Config) (*Session, error) {
	s, err := New(cfg)
	if err != nil {
		return nil, err
	}
	if err := s.Open(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// Open obtains the leases and starts renewing them. It blocks until the lease is
// held, retrying Alloc with exponential backoff (Config.Backoff*) on transport
// errors, timeouts, 5xx, 408, 429, 409 CLOCK_SKEW_TOO_LARGE and 409
// NODE_IDS_EXHAUSTED, logging the server's answer verbatim each time. It then
// renews once at once.
//
// It returns nil once the lease is held; otherwise: ctx's error when ctx ends
// first; ErrClosed when Close was called meanwhile; a *ServerError for an answer
// that retrying cannot fix (400, 401, 403, 409 REQUESTER_COUNT_MISMATCH, …); an error
// wrapping ErrInvalidGrant when the grant fails validation; an error wrapping
// ErrLeaseLost when the first Renew proves the lease gone.
// OnFatal is not called for these. A session whose Open failed has ended: make a
// new one to try again.
func (s *Session) Open(ctx context.Context) error {
	s.mu.Lock()
	switch {
	case s.closing || s.state == stateEnded:
		s.mu.Unlock()
		return ErrClosed
	case s.state != stateNew:
		s.mu.Unlock()
		return errors.New("idkeeper client: Open called twice")
	}
	s.state = stateOpening
	s.opening.Add(1)
	s.mu.Unlock()
	defer s.opening.Done()

	err := s.open(ctx)
	if err != nil {
		s.mu.Lock()
		closing := s.closing
		if !closing {
			s.state = stateEnded
		}
		s.mu.Unlock()
		if !closing { // else Close ends the session, releasing an installed lease
			s.end(err)
		}
	}
	return err
}

func (s *Session) open(ctx context.Context) error {
	r := s.cfg.Requester
	if r == (protocol.Requester{}) {
		var err error
		if r, err = ProcessRequester(); err != nil {
			return err
		}
	}
	// The session's own instance, kept across its Alloc retries and never reused:
	// no other session, of this process or of a twin container, can be answered
	// this session's lease by the idempotent Alloc, nor remove it.
	r.Instance = protocol.NewInstance()
	s.mu.Lock()
	s.requester = r
	s.mu.Unlock()

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(s.ctx, cancel)()
	g, sent, err := s.allocate(ctx)
	if err != nil {
		if s.ctx.Err() != nil {
			return ErrClosed
		}
		return err
	}
	minters, err := s.validateGrant(g, sent)
	if err != nil {
		s.log.Error("idkeeper client: the server's grant is unusable; releasing it", "err", err)
		s.release(time.Time{})
		return err
	}

	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		s.release(time.Time{})
		return ErrClosed
	}
	s.layout, s.leases = g.layout, g.leases
	for i, m := range minters {
		s.gens[i].m.Store(m)
	}
	s.state = stateOpen
	s.setDeadlineLocked(sent, g)
	s.mu.Unlock()
	s.noteCooling(g.leases)

	// The first Renew at once proves the renew path before the program relies on it.
	s.renewMu.Lock()
	fatal := s.renewLocked()
	s.renewMu.Unlock()
	if fatal != nil {
		return fatal
	}
	s.mu.Lock()
	if r := s.halt.Load(); r != nil {
		s.mu.Unlock()
		return r.err
	}
	s.opened = true
	held := s.leases
	s.mu.Unlock()
	s.startDemand()
	// Logged after the first Renew, so that expiresAt is the lease the session
	// holds from now on (the full duration), not the short first lease.
	s.log.Info("idkeeper client: lease held", "requester", r.Key(), "nodes", nodeIDs(held),
		"expiresAt", minExpiry(held), "layout", fmt.Sprintf("%d/%d/%d", g.layout.TimestampBits, g.layout.NodeBits, g.layout.SequenceBits))
	return nil
}

// allocate sends Alloc until it succeeds, ctx ends, or the answer is one that
// retrying cannot fix. sent is the monotonic time the successful request was sent.
func (s *Session) allocate(ctx context.Context) (g grant, sent time.Duration, err error) {
	for attempt := 0; ; attempt++ {
		sent = s.clk.Mono()
		g, err = s.api.alloc(ctx, s.requester, s.cfg.Count, s.clk.Now())
		if err == nil {
			return g, sent, nil
		}
		if ctx.Err() != nil {
			return grant{}, 0, fmt.Errorf("idkeeper client: no lease obtained: %w (last error: %v)", ctx.Err(), err)
		}
		var se *ServerError
		if errors.As(err, &se) && !se.transient() {
			s.log.Error("idkeeper client: alloc refused", "problem", se)
			return grant{}, 0, err
		}
		d := s.backoff(attempt)
		attrs := []any{"attempt", attempt + 1, "retryIn", d, "err", err}
		if se != nil {
			attrs = append(attrs, "problem", se)
		}
		s.log.Warn("idkeeper client: alloc failed; retrying", attrs...)
		if serr := s.sleep(ctx, d); serr != nil {
			return grant{}, 0, fmt.Errorf("idkeeper client: no lease obtained: %w (last error: %v)", serr, err)
		}
	}
}

// backoff is the wait before Alloc retry number attempt+1: min(max, min(max,
// initial × multiplier^attempt) × (1 ± jitter)). The cap comes after the jitter
// too, so that no wait exceeds BackoffMax (DESIGN §4: a client is back within
// 60 s of an NTP fix); capping the base first keeps the jitter at the cap (waits of
// 48–60 s by default), so clients that failed together do not retry together.
func (s *Session) backoff(attempt int) time.Duration {
	c := s.cfg
	draw := rand.Float64
	if s.jitterDraw != nil {
		draw = s.jitterDraw
	}
	// An infinite power (a huge attempt) still caps to BackoffMax.
	base := min(float64(c.BackoffInitial)*math.Pow(c.BackoffMultiplier, float64(attempt)), float64(c.BackoffMax))
	return time.Duration(min(base*(1+c.BackoffJitter*(2*draw()-1)), float64(c.BackoffMax)))
}

// sleep waits d on the session's clock, or until ctx ends.
func (s *Session) sleep(ctx context.Context, d time.Duration) error {
	ch := make(chan struct{})
	t := s.clk.AfterFunc(d, func() { close(ch) })
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		t.Stop()
		return ctx.Err()
	}
}

// release sends a best-effort Remove for a grant this session will not use.
func (s *Session) release(mintedUpTo time.Time) {
	ctx, cancel := context.WithTimeout(context.Background(), s.removeTimeout())
	defer cancel()
	if _, err := s.api.remove(ctx, s.requester, mintedUpTo); err != nil {
		s.log.Error("idkeeper client: remove failed; the server reclaims the node IDs after expiry + grace", "err", err)
	}
}

// Close ends the session: it blocks new issuing (ErrClosed), waits for the calls in
// flight to return (drain: a call waiting for its clock returns within
// MaxBackwardStep + snowflake.ClockStallSlack), stops renewing, and then, if the
// lease is still valid, sends Remove carrying mintedUpTo, the highest timestamp
// minted (left out when nothing was minted), so the server can hand the node IDs
// out again at once. When the lease is already invalid it sends nothing. A failed Remove is logged and
// returned, never fatal: the server reclaims the node IDs after expiry + grace.
// Close is idempotent; a second call waits for the first.
func (s *Session) Close() error {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		<-s.done
		return nil
	}
	s.closing = true
	s.halt.CompareAndSwap(nil, closedReason)
	s.stopTimersLocked()
	s.mu.Unlock()
	s.cancel()
	s.opening.Wait()

	if old := s.gate.Or(closedBit); old&^closedBit != 0 {
		<-s.drained
	}
	s.renewMu.Lock() // a renew that was running has returned
	s.renewMu.Unlock()
	// No issuing call is in flight: close the extra sessions (each drains, then
	// sends its own Remove) before the session's own Remove.
	s.stopDemand()

	s.mu.Lock()
	valid := s.state == stateOpen && s.halt.Load() == closedReason && s.clk.Mono() < time.Duration(s.deadline.Load())
	wasOpen := s.state == stateOpen
	s.state = stateEnded
	s.deadline.Store(notHeld)
	s.mu.Unlock()

	var err error
	switch {
	case valid:
		upTo := s.mintedUpTo()
		ctx, cancel := context.WithTimeout(context.Background(), s.removeTimeout())
		var n int
		n, err = s.api.remove(ctx, s.requester, upTo)
		cancel()
		if err != nil {
			s.log.Error("idkeeper client: remove failed; the server reclaims the node IDs after expiry + grace", "err", err)
		} else {
			s.log.Info("idkeeper client: leases released", "released", n, "mintedUpTo", upTo)
		}
	case wasOpen:
		s.log.Warn("idkeeper client: closed without Remove: the lease was no longer valid")
	}
	s.end(ErrClosed)
	return err
}

// removeTimeout bounds a Remove: RequestTimeout for each replica it may try.
func (s *Session) removeTimeout() time.Duration {
	return s.cfg.RequestTimeout * time.Duration(len(s.api.reps.urls))
}

// mintedUpTo is the latest MintedUpTo of the generators; zero when none minted.
func (s *Session) mintedUpTo() time.Time {
	var t time.Time
	for _, g := range s.gens {
		if m := g.m.Load(); m != nil {
			if u := m.gen.MintedUpTo(); u.After(t) {
				t = u
			}
		}
	}
	return t
}

// fail blocks issuing at once and ends the session because the lease is lost. It
// reports whether the caller must call OnFatal: false when the session had ended, is
// being closed, or is still in Open (which returns the loss as its error).
func (s *Session) fail(cause error) bool {
	s.mu.Lock()
	if s.state != stateOpen {
		s.mu.Unlock()
		return false
	}
	// halt before the deadline, so that a refused call never reads a stale reason.
	if r := (&reason{cause}); !s.halt.CompareAndSwap(nil, r) {
		s.halt.CompareAndSwap(closedReason, r)
	}
	s.deadline.Store(notHeld)
	s.stopTimersLocked()
	closing, opened := s.closing, s.opened
	if !closing {
		s.state = stateEnded
	}
	s.mu.Unlock()
	s.cancel()
	if closing {
		s.log.Warn("idkeeper client: lease lost while closing", "err", cause)
		return false
	}
	s.log.Error("idkeeper client: lease lost; issuing is blocked", "err", cause)
	s.end(cause)
	if s.dem != nil {
		go s.stopDemand() // give the extra sessions back: nothing issues through them any more
	}
	return opened // else Open returns cause itself
}

// end closes Done with err as the reason, once.
func (s *Session) end(err error) {
	s.endOnce.Do(func() {
		s.mu.Lock()
		s.err = err
		s.mu.Unlock()
		s.cancel()
		close(s.done)
	})
}

func (s *Session) stopTimersLocked() {
	for _, t := range []*Timer{&s.renewTimer, &s.expiryTimer} {
		if *t != nil {
			(*t).Stop()
			*t = nil
		}
	}
}

// Done is closed when the session has ended: closed, lease lost, or Open failed.
func (s *Session) Done() <-chan struct{} { return s.done }

// Err is nil while the session has not ended; then ErrClosed after Close, the
// fatal error (wrapping ErrLeaseLost) after a lost lease, or Open's error.
func (s *Session) Err() error {
	select {
	case <-s.done:
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.err
	default:
		return nil
	}
}

// Requester is the identity the session uses, its own instance included; zero
// before Open.
func (s *Session) Requester() protocol.Requester {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requester
}

// Layout is the ID layout the server prescribed; zero before Open succeeded.
func (s *Session) Layout() snowflake.Layout {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.layout
}

// Leases returns the leases held, sorted by node ID, as of the last Alloc or
// Renew; nil before Open succeeded.
func (s *Session) Leases() []Lease {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Lease(nil), s.leases...)
}

// TimeLeft is how long the lease stays valid on the monotonic clock; zero when no
// valid lease is held.
func (s *Session) TimeLeft() time.Duration {
	d := s.deadline.Load()
	if d == notHeld {
		return 0
	}
	return max(time.Duration(d)-s.clk.Mono(), 0)
}

func nodeIDs(ls []Lease) []int64 {
	ids := make([]int64, len(ls))
	for i, l := range ls {
		ids[i] = l.NodeID
	}
	return ids
}

func minExpiry(ls []Lease) time.Time {
	var t time.Time
	for i, l := range ls {
		if i == 0 || l.ExpiresAt.Before(t) {
			t = l.ExpiresAt
		}
	}
	return t
}
