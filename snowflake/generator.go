package snowflake

import (
	"fmt"
	"math"
	"sync/atomic"
	"time"
)

// DefaultMaxBackwardStep is the backward clock step a Generator tolerates when
// Options.MaxBackwardStep is zero.
const DefaultMaxBackwardStep = 5 * time.Second

// ClockStallSlack is added to the tolerated backward step to bound how long one call
// waits, in real (monotonic) time, for the wall clock to reach the millisecond it
// needs; past that it returns ErrClockStalled.
const ClockStallSlack = 50 * time.Millisecond

// maxSleep caps one sleep while waiting for the clock, so that a clock that jumps
// forward (or a renewed window) is noticed soon.
const maxSleep = 10 * time.Millisecond

// Options configures a Generator. The zero value means: the system clock, a
// tolerated backward step of DefaultMaxBackwardStep, and an unbounded window.
type Options struct {
	// Now is the wall clock; nil means time.Now. Tests inject a fake clock. Waits
	// still take real time (see ErrClockStalled).
	Now func() time.Time

	// MaxBackwardStep is how far the wall clock may fall behind the highest
	// reading seen while the generator keeps minting up to that reading (logical
	// time). Claims queued ahead of the clock (fair waiting) are not a step back.
	// Zero means DefaultMaxBackwardStep; a negative value tolerates no step at all.
	// Resolution is one millisecond.
	MaxBackwardStep time.Duration

	// NotBefore and ExpiresAt are the initial lease window, as for SetWindow.
	NotBefore time.Time
	ExpiresAt time.Time

	// OnClockStep, when set, is called twice per rollback episode (see ClockStep):
	// when a call finds the wall clock behind the last minted timestamp, and when
	// the clock has caught up. It runs synchronously in the minting call that
	// found the change, with no lock held, and adds its own time to that call
	// only: keep it short (a log line) and do not mint from it.
	OnClockStep func(ClockStep)
}

// Generator mints unique IDs for one node ID. It is safe for concurrent use.
// NextID and NextIDs do not allocate, and they are lock-free: each call claims its
// IDs by one compare-and-swap, retried only when another call has claimed first.
// When the millisecond's sequence is used up, a call claims the next values anyway,
// in the next millisecond(s), ahead of the clock, and sleeps until the clock reaches
// the last of them before returning: waiting callers are served in the order they
// claimed (fair waiting), and nobody can cut in. Sleeping callers take a mutex only
// to let one of them sleep for all.
//
// Guarantees:
//   - IDs are unique and strictly increasing in the order their calls take effect,
//     so every ID is above every ID returned before the call started.
//   - No ID is returned before the wall clock has reached its millisecond, except
//     during a backward step of the clock: the generator then keeps minting up to
//     the highest clock reading seen (logical time; see Options.MaxBackwardStep).
//   - Every timestamp lies inside the window (NotBefore … ExpiresAt, both inclusive
//     at millisecond resolution) and inside the layout's range; otherwise the call
//     fails. An ID is never truncated or wrapped.
//   - When the 2^SequenceBits IDs of a millisecond are used up, callers sleep until
//     the next one: they do not spin.
//
// Stats counts what the clock did to the callers — backward steps with their width
// and duration, refusals, and the time spent waiting for a later millisecond — at
// no cost to a call that mints on the clock without waiting beyond one atomic load
// per millisecond; Options.OnClockStep reports each backward step as it starts and
// ends.
type Generator struct {
	layout    Layout
	node      int64
	now       func() time.Time
	epochMs   int64
	maxTS     int64
	seqBits   uint
	tsShift   uint  // NodeBits + SequenceBits
	seqMask   int64 // also the largest sequence number
	nodeField int64 // node << SequenceBits
	maxBackMs int64
	maxBack   time.Duration
	maxWait   time.Duration

	window  atomic.Pointer[window]
	rolling atomic.Bool // a rollback episode is open; read once per new millisecond
	onStep  func(ClockStep)
	napper  napper

	// high is the highest wall-clock reading seen (timestamp field), or MinInt64
	// before the first. Backward steps are judged against it, not against claims
	// that queue ahead of the clock. Written once per millisecond, read by every
	// call: on its own cache line, apart from state.
	_    [64]byte
	high atomic.Int64
	_    [56]byte

	// state is the last claimed value: timestamp<<SequenceBits | sequence, or -1
	// before the first. Every batch is claimed by one CAS on it, across
	// milliseconds when needed, possibly ahead of the clock. Padding keeps it alone
	// on its cache line: it is written on every ID.
	state atomic.Int64
	_     [56]byte

	counters counters
}

// window is the lease window in timestamp-field milliseconds, inclusive on both
// sides, with its errors built in advance so that refusing does not allocate.
type window struct {
	nb, ex        int64
	before, ended *WindowError
}

// New returns a Generator for node on layout. It returns an error wrapping
// ErrInvalidLayout for an invalid layout, and an error for a node ID outside
// 0..layout.MaxNode().
func New(layout Layout, node int64, opts Options) (*Generator, error) {
	if err := layout.Validate(); err != nil {
		return nil, err
	}
	if node < 0 || node > layout.MaxNode() {
		return nil, fmt.Errorf("snowflake: node ID %d outside 0..%d", node, layout.MaxNode())
	}
	g := &Generator{
		layout:    layout,
		node:      node,
		now:       opts.Now,
		epochMs:   layout.EpochMillis(),
		maxTS:     layout.MaxTimestamp(),
		seqBits:   uint(layout.SequenceBits),
		tsShift:   uint(layout.NodeBits + layout.SequenceBits),
		seqMask:   layout.MaxSequence(),
		nodeField: node << layout.SequenceBits,
		maxBack:   opts.MaxBackwardStep,
		onStep:    opts.OnClockStep,
	}
	if g.now == nil {
		g.now = time.Now
	}
	switch {
	case g.maxBack == 0:
		g.maxBack = DefaultMaxBackwardStep
	case g.maxBack < 0:
		g.maxBack = 0
	}
	g.maxBackMs = int64(g.maxBack / time.Millisecond)
	g.maxWait = g.maxBack + ClockStallSlack
	g.napper.init()
	g.counters.rollbacks.bounds = &rollbackBounds
	g.counters.rollbackDur.bounds = &rollbackBounds
	g.counters.waits.bounds = &waitBounds
	g.state.Store(-1)
	g.high.Store(math.MinInt64)
	g.SetWindow(opts.NotBefore, opts.ExpiresAt)
	return g, nil
}

// Layout returns the generator's layout.
func (g *Generator) Layout() Layout { return g.layout }

// Node returns the generator's node ID.
func (g *Generator) Node() int64 { return g.node }

// SetWindow replaces the window the generator mints in: timestamps from notBefore
// (rounded up to the millisecond) to expiresAt (rounded down), both inclusive. A zero
// time leaves that side unbounded; a window that ends before it starts refuses every
// call. A renewal moves expiresAt; notBefore should only change with a new grant. It is safe to call concurrently with NextID: a call that
// mints after SetWindow returns checks the new window.
func (g *Generator) SetWindow(notBefore, expiresAt time.Time) {
	w := &window{nb: math.MinInt64, ex: math.MaxInt64}
	if !notBefore.IsZero() {
		ms := notBefore.UnixMilli()
		if notBefore.Nanosecond()%int(time.Millisecond) != 0 {
			ms++
		}
		w.nb = g.sinceEpoch(ms)
	}
	if !expiresAt.IsZero() {
		w.ex = g.sinceEpoch(expiresAt.UnixMilli())
	}
	w.before = &WindowError{Err: ErrBeforeWindow, NotBefore: notBefore, ExpiresAt: expiresAt}
	w.ended = &WindowError{Err: ErrWindowEnded, NotBefore: notBefore, ExpiresAt: expiresAt}
	g.window.Store(w)
}

// Window returns the window as last set; a zero time is an unbounded side.
func (g *Generator) Window() (notBefore, expiresAt time.Time) {
	w := g.window.Load()
	return w.before.NotBefore, w.before.ExpiresAt
}

// sinceEpoch converts Unix milliseconds to the timestamp field, saturating instead
// of overflowing.
func (g *Generator) sinceEpoch(ms int64) int64 {
	r := ms - g.epochMs
	if g.epochMs > 0 && r > ms {
		return math.MinInt64
	}
	if g.epochMs < 0 && r < ms {
		return math.MaxInt64
	}
	return r
}

// MintedUpTo returns the start of the millisecond of the highest timestamp claimed so
// far (UTC), or the zero time if none was: a claim that queued ahead of the clock
// counts from the moment it is made. After issuing has stopped and in-flight calls
// have returned, no minted ID has a later timestamp: this is the mintedUpTo a
// graceful Remove reports.
func (g *Generator) MintedUpTo() time.Time {
	s := g.state.Load()
	if s < 0 {
		return time.Time{}
	}
	return time.UnixMilli(g.epochMs + s>>g.seqBits).UTC()
}

// ClockError returns the *ClockBackwardsError a call would fail with if it read the
// wall clock now: now is behind the highest clock reading seen by more than
// MaxBackwardStep (claims queued ahead of the clock do not count). It returns nil
// otherwise, and before the first ID. A health check uses it: it reads two atomics
// and mints nothing.
func (g *Generator) ClockError(now time.Time) error {
	if g.state.Load() < 0 {
		return nil
	}
	last, nowTS := g.high.Load(), now.UnixMilli()-g.epochMs
	if last-nowTS > g.maxBackMs {
		return &ClockBackwardsError{Step: behindBy(last, nowTS, now), Max: g.maxBack}
	}
	return nil
}

// NextID mints one ID. It fails with a *WindowError (ErrBeforeWindow or
// ErrWindowEnded), ErrTimestampOutOfRange (the clock is before the layout's epoch or
// the layout's lifetime has ended), a *ClockBackwardsError (ErrClockBackwards) or an
// error wrapping ErrClockStalled; it then mints nothing. When the millisecond's
// sequence is used up it claims the next millisecond's next sequence number and
// sleeps until the clock reaches it; while the clock is behind the highest reading
// seen by at most MaxBackwardStep it mints at logical time, up to that reading.
func (g *Generator) NextID() (int64, error) {
	p, _, err := g.reserve(1)
	if err != nil {
		return 0, err
	}
	return g.id(p), nil
}

// NextIDs fills dst with ascending IDs. It claims the whole batch with one atomic
// operation — across milliseconds when one millisecond's sequence is not enough —
// so callers that must wait for later milliseconds are served in the order they
// claimed: a batch never gets IDs from an earlier millisecond than a batch that
// claimed before it. It then sleeps until the clock reaches the batch's last
// millisecond. A batch is split into several claims only at the window's end, at the
// layout's end, during a backward step of the clock (no claim reaches past the
// highest clock reading then) and when it would reach more than MaxQueueAhead past
// the clock. It returns how many IDs it wrote; fewer than len(dst) only with the
// error that stopped it (the errors of NextID). The IDs already written stay valid
// and unique.
func (g *Generator) NextIDs(dst []int64) (int, error) {
	n := 0
	for n < len(dst) {
		p, k, err := g.reserve(int64(len(dst) - n))
		if err != nil {
			return n, err
		}
		// Consecutive sequence numbers in one millisecond are consecutive IDs; a
		// claim rolls from a millisecond's last sequence to the next one's 0.
		for end := p + k; p < end; {
			seg := min(end-p, g.seqMask+1-p&g.seqMask)
			id := g.id(p)
			for i := range seg {
				dst[n] = id + i
				n++
			}
			p += seg
		}
	}
	return n, nil
}

// id turns a packed state value into an ID.
func (g *Generator) id(p int64) int64 {
	return (p>>g.seqBits)<<g.tsShift | g.nodeField | p&g.seqMask
}

// MaxQueueAhead bounds how far past the highest clock reading a claim may reach:
// callers whose claim would start later than that sleep before claiming, and a
// claim is cut there. One second is 1,024,000 IDs of the default layout.
const MaxQueueAhead = time.Second

const maxAheadMs = int64(MaxQueueAhead / time.Millisecond)

// reserve claims 1..want consecutive packed values (timestamp<<SequenceBits |
// sequence), possibly across milliseconds, with one CAS, and returns the first and
// the count once the clock has reached the last one's millisecond.
func (g *Generator) reserve(want int64) (first, k int64, err error) {
	var waitFrom time.Duration // monoNow() at this call's first sleep; 0: none
	for {
		// The high-water mark is loaded before the clock is read: a reading below
		// it is a real backward step, never a race with another call.
		h := g.high.Load()
		t := g.now()
		nowTS := t.UnixMilli() - g.epochMs
		behind := false
		switch {
		case nowTS > h:
			g.raise(h, nowTS, t)
			h = nowTS
		case nowTS < h:
			if !g.rolling.Load() && !g.openEpisode(h, nowTS, t) {
				continue
			}
			if err := g.stepBack(h, nowTS, t); err != nil {
				g.endWait(waitFrom)
				return 0, 0, err
			}
			behind = true
		}
		old := g.state.Load()
		if old < 0 || nowTS > old>>g.seqBits {
			// The clock has passed every claim: start at its millisecond.
			if nowTS < 0 || nowTS > g.maxTS {
				g.endWait(waitFrom)
				return 0, 0, ErrTimestampOutOfRange
			}
			first = nowTS << g.seqBits
		} else {
			// Continue after the last claim, rolling into the next millisecond
			// (ahead of the clock) when its sequence is used up.
			first = old + 1
		}
		ts := first >> g.seqBits
		w := g.window.Load()
		switch {
		case ts < w.nb:
			g.endWait(waitFrom)
			return 0, 0, w.before
		case ts > g.maxTS:
			g.endWait(waitFrom)
			return 0, 0, ErrTimestampOutOfRange
		case ts > w.ex:
			g.endWait(waitFrom)
			return 0, 0, w.ended
		}
		// How far this claim may reach: never past the window or the layout; during
		// a backward step not past the highest reading (logical time, as before
		// fair waiting); otherwise not more than MaxQueueAhead past it.
		reach := h + maxAheadMs
		if behind {
			reach = h
		}
		if ts > reach {
			if err := g.waitFor(ts-(reach-h), t, &waitFrom); err != nil {
				g.endWait(waitFrom)
				return 0, 0, err
			}
			continue
		}
		lastTS := min(reach, g.maxTS, w.ex)
		last := min(first+want-1, (lastTS+1)<<g.seqBits-1)
		if !g.state.CompareAndSwap(old, last) {
			continue
		}
		lastTS = last >> g.seqBits
		if lastTS > h {
			// Claimed ahead of the clock: no ID is handed out before the clock
			// reaches the last claimed millisecond.
			if err := g.await(lastTS, h, old, last, w, &waitFrom); err != nil {
				g.endWait(waitFrom)
				return 0, 0, err
			}
		}
		g.endWait(waitFrom)
		// A SetWindow that completed before the claim or during the wait must hold
		// for every claimed value; they are then burnt (a gap), never handed out.
		if w2 := g.window.Load(); w2 != w {
			if ts < w2.nb {
				return 0, 0, w2.before
			}
			if lastTS > w2.ex {
				return 0, 0, w2.ended
			}
		}
		return first, last - first + 1, nil
	}
}

// raise moves the high-water mark of clock readings from h up to nowTS (read as t),
// unless another call raised it as far, and ends an open rollback episode.
func (g *Generator) raise(h, nowTS int64, t time.Time) {
	for !g.high.CompareAndSwap(h, nowTS) {
		if h = g.high.Load(); h >= nowTS {
			return
		}
	}
	if g.rolling.Load() {
		g.closeEpisode(nowTS, t)
	}
}

// await sleeps until the clock reaches lastTS, the last millisecond of the claim
// (old, last] made when the highest clock reading was h under window w. It fails
// with ErrClockStalled when the clock has not got there within maxWait plus the
// time the claim was ahead; the claim is then given back if nobody claimed after
// it, and burnt otherwise. It fails with the window's error at once when a
// SetWindow excludes the claim.
func (g *Generator) await(lastTS, h, old, last int64, w *window, from *time.Duration) error {
	var start time.Duration // monoNow() at the first sleep
	limit := g.maxWait + time.Duration(lastTS-h)*time.Millisecond
	for {
		hh := g.high.Load()
		if hh >= lastTS {
			return nil
		}
		t := g.now()
		nowTS := t.UnixMilli() - g.epochMs
		if nowTS > hh {
			g.raise(hh, nowTS, t)
			if nowTS >= lastTS {
				return nil
			}
		}
		if w2 := g.window.Load(); w2 != w && (last>>g.seqBits > w2.ex) {
			return w2.ended
		}
		// Counted as a wait only once it sleeps: a claim that another call's
		// reading has already covered is no wait.
		if start == 0 {
			start = monoNow()
			if *from == 0 {
				*from = start
			}
		} else if waited := monoNow() - start; waited > limit {
			g.state.CompareAndSwap(last, old)
			return fmt.Errorf("%w: waited %v for millisecond %d, clock still at %d",
				ErrClockStalled, waited, lastTS, nowTS)
		}
		// Sleep to the next millisecond at most: the napper sleeps for every caller
		// of the generator, and each waits for its own millisecond.
		d := time.Duration(lastTS-nowTS)*time.Millisecond - subMilli(t)
		g.napper.nap(min(d, time.Millisecond-subMilli(t), maxSleep))
	}
}

// waitFor sleeps towards the wall-clock millisecond target (timestamp field), given
// the clock read t, before a claim. It returns ErrClockStalled once this call has
// waited longer than maxWait in real time; *from is the monoNow() of the call's
// first sleep.
func (g *Generator) waitFor(target int64, t time.Time, from *time.Duration) error {
	// Measured on the real monotonic clock, so that a frozen injected clock still
	// ends the wait.
	mono := monoNow()
	if *from == 0 {
		*from = mono
	} else if waited := mono - *from; waited > g.maxWait {
		return fmt.Errorf("%w: waited %v for millisecond %d, clock still at %d",
			ErrClockStalled, waited, target, t.UnixMilli()-g.epochMs)
	}
	d := time.Duration(target-(t.UnixMilli()-g.epochMs))*time.Millisecond - subMilli(t)
	g.napper.nap(min(d, maxSleep))
	return nil
}

// subMilli is the part of t below the millisecond, consistent with UnixMilli's
// rounding down.
func subMilli(t time.Time) time.Duration {
	return time.Duration(t.Nanosecond() % int(time.Millisecond))
}
