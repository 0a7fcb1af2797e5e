package snowflake

import (
	"sync"
	"sync/atomic"
	"time"
)

// The buckets of Stats' histograms: upper bounds, inclusive, in whole or fractional
// milliseconds. A backward step of the default MaxBackwardStep (5 s) is the last
// bucket but one of the rollback histograms, so "tolerated" and "refused" fall on
// either side of a bound.
var (
	rollbackBounds = [histBounds]time.Duration{
		time.Millisecond, 2 * time.Millisecond, 5 * time.Millisecond, 10 * time.Millisecond,
		25 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond, 250 * time.Millisecond,
		500 * time.Millisecond, time.Second, 5 * time.Second, time.Minute,
	}
	waitBounds = [histBounds]time.Duration{
		50 * time.Microsecond, 100 * time.Microsecond, 250 * time.Microsecond, 500 * time.Microsecond,
		time.Millisecond, 2500 * time.Microsecond, 5 * time.Millisecond, 10 * time.Millisecond,
		25 * time.Millisecond, 100 * time.Millisecond, time.Second, 5 * time.Second,
	}
)

const histBounds = 12

// Stats are a generator's counters since New. They never decrease. Reading them
// takes atomic loads only; minting never waits for a reader.
type Stats struct {
	// ClockRollbacks has one observation per rollback episode: a call found the
	// wall clock behind the highest reading seen so far (read after it loaded that
	// mark, so that a race with another call does not count; claims queued ahead
	// of the clock never count). The value is how far behind, as first found; see
	// ClockStep.
	ClockRollbacks Histogram
	// ClockRollbackDurations has one observation per episode that ended: how
	// long, in real time, the wall clock took to read the last minted millisecond
	// again (ClockStep.Duration).
	ClockRollbackDurations Histogram
	// ClockRefusals counts the calls that failed with a *ClockBackwardsError: the
	// clock was behind by more than MaxBackwardStep.
	ClockRefusals uint64
	// SequenceWaits has one observation per wait for a later millisecond: the
	// real (monotonic) time from the first sleep of a call until it minted or
	// failed. A call waits when it has claimed values of a millisecond the clock
	// has not reached (the sequence was used up: fair waiting queues it there),
	// and also, while the clock is behind, until it passes the highest reading. A
	// NextIDs call counts one wait per claim that slept; a batch is one claim
	// unless it is cut (see Generator.NextIDs).
	SequenceWaits Histogram
	// InRollback reports an episode that has not ended yet.
	InRollback bool
}

// Histogram is a snapshot of durations counted in fixed buckets.
type Histogram struct {
	// Bounds are the buckets' upper bounds, ascending: bucket i counts the
	// observations ≤ Bounds[i] and > Bounds[i-1]. Shared: do not modify.
	Bounds []time.Duration
	// Counts has one entry per bucket and a last one for the observations above
	// every bound. Not cumulative.
	Counts []uint64
	// Count is the number of observations: the sum of Counts.
	Count uint64
	// Sum is the sum of the observations. It is read apart from Counts, so a
	// snapshot taken while an observation is being made may hold it in one and
	// not yet in the other.
	Sum time.Duration
}

// ClockStep reports a rollback episode to Options.OnClockStep: once when a call
// finds the wall clock behind the last minted timestamp, and once, with CaughtUp
// set, when the clock reads that millisecond again. Episodes do not overlap; a
// further step back during one widens it (Width) rather than starting another.
type ClockStep struct {
	// Episode numbers the generator's episodes from 1.
	Episode uint64
	// LastMinted is the start of the millisecond the clock fell behind: the
	// highest clock reading seen before the step, up to which the generator
	// mints at logical time (claims queued ahead of the clock may be later).
	LastMinted time.Time
	// Width is how far the clock read was behind LastMinted: as first found at
	// the start; the widest found during the episode at the end. It is a lower
	// bound of the step, at millisecond resolution of the last timestamp.
	Width time.Duration
	// Max is the tolerated step (MaxBackwardStep after defaults): within it the
	// generator kept minting at LastMinted (logical time); past it calls failed
	// with a *ClockBackwardsError.
	Max time.Duration
	// CaughtUp is false at the start of the episode, true at its end.
	CaughtUp bool
	// Duration, at the end, is how long the clock took, in real (monotonic)
	// time, to read LastMinted's millisecond again. The end is noticed by the
	// first call that mints at a later millisecond, and the time the clock
	// has spent past LastMinted by then is subtracted: an idle generator still
	// reports how long the clock was behind. Zero when the wall clock is one a
	// test moves by hand.
	Duration time.Duration
	// Refused, at the end, counts the calls refused during the episode.
	Refused uint64
}

// monoBase anchors monoNow.
var monoBase = time.Now()

// monoNow reads the runtime's monotonic clock; it is never zero.
func monoNow() time.Duration { return time.Since(monoBase) + 1 }

// histogram counts durations in fixed buckets with atomic adds: an observation
// takes no lock and allocates nothing.
type histogram struct {
	bounds *[histBounds]time.Duration
	counts [histBounds + 1]atomic.Uint64
	sum    atomic.Int64 // nanoseconds
}

func (h *histogram) observe(d time.Duration) {
	i := 0
	for i < histBounds && d > h.bounds[i] {
		i++
	}
	h.counts[i].Add(1)
	h.sum.Add(int64(d))
}

func (h *histogram) snapshot() Histogram {
	s := Histogram{Bounds: h.bounds[:], Counts: make([]uint64, histBounds+1), Sum: time.Duration(h.sum.Load())}
	for i := range s.Counts {
		s.Counts[i] = h.counts[i].Load()
		s.Count += s.Counts[i]
	}
	return s
}

// counters are a generator's slow-path counters: written only when a call
// waits, finds the clock behind or is refused, never by a call that mints
// on the clock without waiting.
type counters struct {
	waits       histogram
	rollbacks   histogram
	rollbackDur histogram
	refused     atomic.Uint64
	widest      atomic.Int64 // the open episode's widest step, ns

	// mu serialises the start and the end of an episode (twice per episode);
	// the fields below are the open episode's, or the last one's.
	mu       sync.Mutex
	episodes uint64
	mark     int64         // the highest clock reading, which the clock fell behind
	start    time.Duration // monoNow() when it was found
	refused0 uint64        // refused when it was found
}

// Stats returns the generator's counters. It allocates the snapshots' slices; it
// is safe to call while others mint.
func (g *Generator) Stats() Stats {
	c := &g.counters
	return Stats{
		ClockRollbacks:         c.rollbacks.snapshot(),
		ClockRollbackDurations: c.rollbackDur.snapshot(),
		ClockRefusals:          c.refused.Load(),
		SequenceWaits:          c.waits.snapshot(),
		InRollback:             g.rolling.Load(),
	}
}

// endWait records the wait of a call that began waiting at monoNow() from (zero:
// it did not wait). Small enough to inline: a call that did not wait pays one
// comparison.
func (g *Generator) endWait(from time.Duration) {
	if from != 0 {
		g.noteWait(from)
	}
}

func (g *Generator) noteWait(from time.Duration) { g.counters.waits.observe(monoNow() - from) }

// behindBy is how far the clock read t (timestamp field nowTS) is behind the start
// of the millisecond last.
func behindBy(last, nowTS int64, t time.Time) time.Duration {
	return time.Duration(last-nowTS)*time.Millisecond - subMilli(t)
}

// stepBack handles a clock read t (timestamp field nowTS) behind the last minted
// timestamp last while an episode is open: it notes the step's width, and refuses
// it past MaxBackwardStep.
func (g *Generator) stepBack(last, nowTS int64, t time.Time) error {
	step := behindBy(last, nowTS, t)
	c := &g.counters
	for w := c.widest.Load(); int64(step) > w && !c.widest.CompareAndSwap(w, int64(step)); w = c.widest.Load() {
	}
	if last-nowTS > g.maxBackMs {
		c.refused.Add(1)
		return &ClockBackwardsError{Step: step, Max: g.maxBack}
	}
	return nil
}

// openEpisode starts a rollback episode for a clock read t behind the last minted
// timestamp last, unless one is open. It reports false when a later millisecond
// has been minted since last was loaded: the clock has caught up, read it again.
func (g *Generator) openEpisode(last, nowTS int64, t time.Time) bool {
	c := &g.counters
	step := behindBy(last, nowTS, t)
	c.mu.Lock()
	if g.rolling.Load() {
		c.mu.Unlock()
		return true
	}
	// A later reading since last was loaded means the clock has caught up: read
	// it again. raise ends an open episode after it moved the mark, so an episode
	// it missed is ended by the next millisecond's raise.
	if g.high.Load() != last {
		c.mu.Unlock()
		return false
	}
	c.episodes++
	c.mark, c.start, c.refused0 = last, monoNow(), c.refused.Load()
	c.widest.Store(int64(step))
	c.rollbacks.observe(step)
	g.rolling.Store(true)
	info := ClockStep{Episode: c.episodes, LastMinted: g.msTime(last), Width: step, Max: g.maxBack}
	c.mu.Unlock()
	if g.onStep != nil {
		g.onStep(info)
	}
	return true
}

// closeEpisode ends the open episode, if any, once a call has minted at
// timestamp ts, later than the episode's last minted timestamp, with the clock
// read t.
func (g *Generator) closeEpisode(ts int64, t time.Time) {
	c := &g.counters
	c.mu.Lock()
	if !g.rolling.Load() || ts <= c.mark {
		c.mu.Unlock()
		return
	}
	elapsed := monoNow() - c.start
	past := time.Duration(ts-c.mark)*time.Millisecond + subMilli(t)
	d := min(max(elapsed-past, 0), elapsed)
	c.rollbackDur.observe(d)
	g.rolling.Store(false)
	info := ClockStep{Episode: c.episodes, LastMinted: g.msTime(c.mark), Width: time.Duration(c.widest.Load()),
		Max: g.maxBack, CaughtUp: true, Duration: d, Refused: c.refused.Load() - c.refused0}
	c.mu.Unlock()
	if g.onStep != nil {
		g.onStep(info)
	}
}

// msTime is the start of the timestamp field's millisecond ts, UTC.
func (g *Generator) msTime(ts int64) time.Time { return time.UnixMilli(g.epochMs + ts).UTC() }
