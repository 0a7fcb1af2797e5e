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

	// MaxBackwardStep is how far the wall clock may fall behind the last minted
	// timestamp while the generator keeps minting at that timestamp (logical time).
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
// NextID and NextIDs do not allocate, and they are lock-free while the current
// millisecond has sequence numbers left: each ID is claimed by one compare-and-swap,
// retried only when another call has claimed one. Callers that find the sequence
// used up sleep, and take a mutex only to let one of them sleep for all.
//
// Guarantees:
//   - IDs are unique and strictly increasing in the order their calls take effect,
//     so every ID is above every ID returned before the call started.
//   - The timestamp of an ID is never ahead of the wall clock as read by the call
//     that minted it, except that it never falls below the generator's last minted
//     timestamp (logical time; see Options.MaxBackwardStep).
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

	// state is the last minted ID without its node field: timestamp<<SequenceBits |
	// sequence, or -1 before the first. Every ID is claimed by one CAS on it.
	// Padding keeps it alone on its cache line: it is written on every ID, and
	// another generator's fields must not share its line.
	_     [64]byte
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

// MintedUpTo returns the start of the millisecond of the highest timestamp minted so
// far (UTC), or the zero time if none was. After issuing has stopped and in-flight
// calls have returned, no minted ID has a later timestamp: this is the mintedUpTo a
// graceful Remove reports.
func (g *Generator) MintedUpTo() time.Time {
	s := g.state.Load()
	if s < 0 {
		return time.Time{}
	}
	return time.UnixMilli(g.epochMs + s>>g.seqBits).UTC()
}

// ClockError returns the *ClockBackwardsError a call would fail with if it read the
// wall clock now: now is behind the last minted timestamp by more than
// MaxBackwardStep. It returns nil otherwise, and before the first ID. A health check
// uses it: it reads one atomic and mints nothing.
func (g *Generator) ClockError(now time.Time) error {
	s := g.state.Load()
	if s < 0 {
		return nil
	}
	last, nowTS := s>>g.seqBits, now.UnixMilli()-g.epochMs
	if last-nowTS > g.maxBackMs {
		return &ClockBackwardsError{Step: behindBy(last, nowTS, now), Max: g.maxBack}
	}
	return nil
}

// NextID mints one ID. It fails with a *WindowError (ErrBeforeWindow or
// ErrWindowEnded), ErrTimestampOutOfRange (the clock is before the layout's epoch or
// the layout's lifetime has ended), a *ClockBackwardsError (ErrClockBackwards) or an
// error wrapping ErrClockStalled; it then mints nothing. When the millisecond's
// sequence is used up it sleeps until the next millisecond; while the clock is behind
// the last timestamp by at most MaxBackwardStep it waits for the clock to catch up.
func (g *Generator) NextID() (int64, error) {
	p, _, err := g.reserve(1)
	if err != nil {
		return 0, err
	}
	return g.id(p), nil
}

// NextIDs fills dst with ascending IDs, claiming up to a whole millisecond's sequence
// with one atomic operation. It returns how many it wrote; fewer than len(dst) only
// with the error that stopped it (the errors of NextID). The IDs already written
// stay valid and unique.
func (g *Generator) NextIDs(dst []int64) (int, error) {
	n := 0
	for n < len(dst) {
		p, k, err := g.reserve(int64(len(dst) - n))
		if err != nil {
			return n, err
		}
		// Consecutive sequence numbers in one millisecond are consecutive IDs.
		id := g.id(p)
		for i := range k {
			dst[n] = id + i
			n++
		}
	}
	return n, nil
}

// id turns a packed state value into an ID.
func (g *Generator) id(p int64) int64 {
	return (p>>g.seqBits)<<g.tsShift | g.nodeField | p&g.seqMask
}

// reserve claims 1..want consecutive packed values (timestamp<<SequenceBits |
// sequence), all in one millisecond, and returns the first and the count.
func (g *Generator) reserve(want int64) (first, k int64, err error) {
	var waitFrom time.Duration // monoNow() at this call's first sleep; 0: none
	for {
		t := g.now()
		nowTS := t.UnixMilli() - g.epochMs
		old := g.state.Load()
		if last := old >> g.seqBits; old >= 0 && nowTS <= last {
			// The clock is still in (or back before) the last millisecond: keep it.
			if nowTS < last {
				if !g.rolling.Load() {
					// A read taken before last was loaded may just have lost a race
					// with the call that minted last: only a read taken after it
					// proves that the clock went back.
					t = g.now()
					if nowTS = t.UnixMilli() - g.epochMs; nowTS >= last || !g.openEpisode(last, nowTS, t) {
						continue
					}
				}
				if err := g.stepBack(last, nowTS, t); err != nil {
					g.endWait(waitFrom)
					return 0, 0, err
				}
			}
			seq := old & g.seqMask
			if seq == g.seqMask {
				if err := g.waitFor(last+1, t, &waitFrom); err != nil {
					g.endWait(waitFrom)
					return 0, 0, err
				}
				continue
			}
			first, k = old+1, min(want, g.seqMask-seq)
		} else {
			if nowTS < 0 || nowTS > g.maxTS {
				g.endWait(waitFrom)
				return 0, 0, ErrTimestampOutOfRange
			}
			first, k = nowTS<<g.seqBits, min(want, g.seqMask+1)
		}
		ts := first >> g.seqBits
		w := g.window.Load()
		if ts < w.nb {
			g.endWait(waitFrom)
			return 0, 0, w.before
		}
		if ts > w.ex {
			g.endWait(waitFrom)
			return 0, 0, w.ended
		}
		if g.state.CompareAndSwap(old, first+k-1) {
			g.endWait(waitFrom)
			// Sequence 0 is minted only on a millisecond later than the last one.
			if first&g.seqMask == 0 && g.rolling.Load() {
				g.closeEpisode(ts, t)
			}
			// A SetWindow that completed before the CAS must hold for this ID; the
			// values are then burnt (a gap), never handed out.
			if w2 := g.window.Load(); w2 != w {
				if ts < w2.nb {
					return 0, 0, w2.before
				}
				if ts > w2.ex {
					return 0, 0, w2.ended
				}
			}
			return first, k, nil
		}
	}
}

// waitFor sleeps towards the wall-clock millisecond target (timestamp field), given
// the clock read t. It returns at once when target can never be minted, and
// ErrClockStalled once this call has waited longer than maxWait in real time;
// *from is the monoNow() of the call's first sleep.
func (g *Generator) waitFor(target int64, t time.Time, from *time.Duration) error {
	if target > g.maxTS {
		return ErrTimestampOutOfRange
	}
	if w := g.window.Load(); target > w.ex {
		return w.ended
	}
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
