package snowflake

import (
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// steps records the ClockSteps a generator reports.
type steps struct {
	mu  sync.Mutex
	got []ClockStep
}

func (s *steps) add(c ClockStep) {
	s.mu.Lock()
	s.got = append(s.got, c)
	s.mu.Unlock()
}

func (s *steps) all() []ClockStep {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.got)
}

// offsetClock is the system clock plus a settable offset: a wall clock that steps
// but otherwise runs in real time, as the generator's monotonic clock does.
type offsetClock struct{ off atomic.Int64 }

func (c *offsetClock) Now() time.Time           { return time.Now().Add(time.Duration(c.off.Load())) }
func (c *offsetClock) Step(d time.Duration)     { c.off.Add(int64(d)) }
func (c *offsetClock) behind(g *Generator) bool { return c.Now().Before(g.MintedUpTo()) }

// bucketOf is the index of the bucket of h that holds d.
func bucketOf(h Histogram, d time.Duration) int {
	i := 0
	for i < len(h.Bounds) && d > h.Bounds[i] {
		i++
	}
	return i
}

// checkHist fails unless h holds exactly the observations want.
func checkHist(t *testing.T, name string, h Histogram, want ...time.Duration) {
	t.Helper()
	counts := make([]uint64, len(h.Bounds)+1)
	var sum time.Duration
	for _, d := range want {
		counts[bucketOf(h, d)]++
		sum += d
	}
	if h.Count != uint64(len(want)) || h.Sum != sum || !slices.Equal(h.Counts, counts) {
		t.Errorf("%s: count %d, sum %v, buckets %v; want count %d, sum %v, buckets %v", name, h.Count, h.Sum, h.Counts,
			len(want), sum, counts)
	}
}

// A step back within MaxBackwardStep is one episode however many calls mint at
// logical time meanwhile: one rollback of its width, one hook call at its start and
// one when the clock has caught up, no refusal, no wait.
func TestStatsRollbackAbsorbed(t *testing.T) {
	var rec steps
	clock := newFakeClock(at(10_000))
	g := mustNew(t, DefaultLayout, 2, Options{Now: clock.Now, MaxBackwardStep: time.Second, OnClockStep: rec.add})
	mustNext(t, g)
	if st := g.Stats(); st.ClockRollbacks.Count != 0 || st.InRollback || len(rec.all()) != 0 {
		t.Fatalf("before any step: %+v, %v", st, rec.all())
	}
	clock.Set(at(9_500).Add(-300 * time.Microsecond))
	for range 10 {
		mustNext(t, g)
		clock.Advance(10 * time.Millisecond) // still behind
	}
	const width = 500*time.Millisecond + 300*time.Microsecond
	st := g.Stats()
	checkHist(t, "rollbacks", st.ClockRollbacks, width)
	checkHist(t, "rollback durations", st.ClockRollbackDurations)
	checkHist(t, "waits", st.SequenceWaits)
	if !st.InRollback || st.ClockRefusals != 0 {
		t.Fatalf("while behind: InRollback %v, refusals %d", st.InRollback, st.ClockRefusals)
	}
	want := []ClockStep{{Episode: 1, LastMinted: at(10_000), Width: width, Max: time.Second}}
	if got := rec.all(); !slices.Equal(got, want) {
		t.Fatalf("hook while behind: %+v, want %+v", got, want)
	}

	clock.Set(at(10_000).Add(400 * time.Microsecond)) // back in the last millisecond
	mustNext(t, g)
	if !g.Stats().InRollback {
		t.Fatal("the episode ended before a later millisecond was minted")
	}
	clock.Set(at(10_002))
	if p := decode(t, mustNext(t, g)); p.Timestamp != 10_002 {
		t.Fatalf("after catching up: %+v", p)
	}
	st = g.Stats()
	if st.InRollback || st.ClockRollbackDurations.Count != 1 || st.ClockRollbacks.Count != 1 {
		t.Fatalf("after catching up: %+v", st)
	}
	got := rec.all()
	if len(got) != 2 {
		t.Fatalf("hook: %+v, want the start and the end", got)
	}
	// The fake wall clock moved 500 ms while real time did not: no time to report.
	end := ClockStep{Episode: 1, LastMinted: at(10_000), Width: width, Max: time.Second, CaughtUp: true}
	if got[1] != end {
		t.Fatalf("hook at the end: %+v, want %+v", got[1], end)
	}

	// A second step is a second episode.
	clock.Set(at(10_000))
	mustNext(t, g)
	if st := g.Stats(); st.ClockRollbacks.Count != 2 || !st.InRollback || rec.all()[2].Episode != 2 {
		t.Fatalf("second step: %+v, %+v", st, rec.all())
	}
}

// A step past MaxBackwardStep is refused call by call, within one episode; the
// end reports how many calls were refused and the widest step.
func TestStatsRollbackRefused(t *testing.T) {
	var rec steps
	clock := newFakeClock(at(10_000))
	g := mustNew(t, DefaultLayout, 2, Options{Now: clock.Now, MaxBackwardStep: time.Second, OnClockStep: rec.add})
	mustNext(t, g)
	clock.Set(at(8_000))
	for range 3 {
		if _, err := g.NextID(); !errors.Is(err, ErrClockBackwards) {
			t.Fatalf("2 s back: %v", err)
		}
	}
	clock.Set(at(7_000)) // a further step, in the same episode
	if _, err := g.NextID(); !errors.Is(err, ErrClockBackwards) {
		t.Fatalf("3 s back: %v", err)
	}
	clock.Set(at(9_500)) // within the tolerated step again
	mustNext(t, g)
	st := g.Stats()
	checkHist(t, "rollbacks", st.ClockRollbacks, 2*time.Second)
	if st.ClockRefusals != 4 || !st.InRollback {
		t.Fatalf("refusals %d, InRollback %v; want 4, true", st.ClockRefusals, st.InRollback)
	}
	clock.Set(at(10_001))
	mustNext(t, g)
	want := []ClockStep{
		{Episode: 1, LastMinted: at(10_000), Width: 2 * time.Second, Max: time.Second},
		{Episode: 1, LastMinted: at(10_000), Width: 3 * time.Second, Max: time.Second, CaughtUp: true, Refused: 4},
	}
	if got := rec.all(); !slices.Equal(got, want) {
		t.Fatalf("hook: %+v\nwant %+v", got, want)
	}
	if st := g.Stats(); st.InRollback || st.ClockRollbackDurations.Count != 1 || st.ClockRefusals != 4 {
		t.Fatalf("after catching up: %+v", st)
	}
}

// The duration of an episode is how long the wall clock took to get back to the
// last minted millisecond, in real time, even when no call mints for a while after
// it did.
func TestStatsRollbackDuration(t *testing.T) {
	const width = 40 * time.Millisecond
	for _, idle := range []bool{false, true} {
		var rec steps
		var clock offsetClock
		g := mustNew(t, DefaultLayout, 2, Options{Now: clock.Now, OnClockStep: rec.add})
		mustNext(t, g)
		clock.Step(-width)
		mustNext(t, g)
		if idle {
			time.Sleep(3 * width)
		}
		for clock.behind(g) || g.Stats().InRollback {
			mustNext(t, g)
			time.Sleep(time.Millisecond)
		}
		got := rec.all()
		if len(got) != 2 || !got[1].CaughtUp {
			t.Fatalf("idle %v: hook %+v, want a start and an end", idle, got)
		}
		// The clock stepped back by width from somewhere in the last millisecond:
		// it is behind that millisecond's start by up to width.
		if w := got[0].Width; w > width || w < width-time.Millisecond {
			t.Errorf("idle %v: width %v, want %v less the part of a millisecond", idle, w, width)
		}
		// The width's own millisecond resolution aside, the duration differs from it
		// only by the time between clock reads: microseconds, unless the test is
		// descheduled in between.
		if d := got[1].Duration; d < width/2 || d > 2*width {
			t.Errorf("idle %v: duration %v, want about the width, %v", idle, d, got[0].Width)
		}
		checkHist(t, "rollback durations", g.Stats().ClockRollbackDurations, got[1].Duration)
	}
}

// A call that finds the sequence used up waits for the next millisecond, and the
// wait is counted once, with its real duration.
func TestStatsSequenceWait(t *testing.T) {
	clock := newFakeClock(at(5000))
	g := mustNew(t, DefaultLayout, 1, Options{Now: clock.Now})
	exhaust(t, g)
	checkHist(t, "waits before", g.Stats().SequenceWaits)
	go func() {
		time.Sleep(20 * time.Millisecond)
		clock.Advance(time.Millisecond)
	}()
	start := time.Now()
	mustNext(t, g)
	waited := time.Since(start)
	h := g.Stats().SequenceWaits
	checkHist(t, "waits", h, h.Sum)
	if h.Sum < 15*time.Millisecond || h.Sum > waited {
		t.Fatalf("wait of %v counted, the call took %v", h.Sum, waited)
	}
	if st := g.Stats(); st.ClockRollbacks.Count != 0 {
		t.Fatalf("rollbacks counted: %+v", st.ClockRollbacks)
	}

	// A call refused before it sleeps did not wait.
	exhaust(t, g)
	g.SetWindow(time.Time{}, at(5001))
	if _, err := g.NextID(); !errors.Is(err, ErrWindowEnded) {
		t.Fatalf("waiting past the window: %v", err)
	}
	if c := g.Stats().SequenceWaits.Count; c != 1 {
		t.Fatalf("a call refused before sleeping counted a wait: %d waits", c)
	}

	// A wait that ends in an error is counted.
	g = mustNew(t, DefaultLayout, 1, Options{Now: clock.Now, MaxBackwardStep: 10 * time.Millisecond})
	exhaust(t, g)
	if _, err := g.NextID(); !errors.Is(err, ErrClockStalled) {
		t.Fatalf("frozen clock: %v", err)
	}
	h = g.Stats().SequenceWaits
	checkHist(t, "stalled wait", h, h.Sum)
	if h.Sum < 10*time.Millisecond+ClockStallSlack {
		t.Fatalf("stalled wait counted as %v", h.Sum)
	}
}

// Goroutines that race for one generator on the system clock read the clock before
// another call mints a later millisecond all the time — at every millisecond on
// wideLayout, where nobody waits: none of that is a rollback. At the ceiling of
// narrowLayout (four IDs per millisecond, reached however loaded the machine is),
// their waits are counted. The default layout's ceiling of 4,096 per millisecond is
// out of reach for four goroutines under the race detector on a busy machine, so it
// is held to no rollbacks only.
func TestStatsNoRollbackFromRaces(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for 900 ms")
	}
	narrowLayout := Layout{Epoch: DefaultEpoch, TimestampBits: 41, NodeBits: 20, SequenceBits: 2}
	for _, l := range []Layout{DefaultLayout, wideLayout, narrowLayout} {
		var rec steps
		g := mustNew(t, l, 4, Options{OnClockStep: rec.add})
		deadline := time.Now().Add(300 * time.Millisecond)
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				for time.Now().Before(deadline) {
					if _, err := g.NextID(); err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		st := g.Stats()
		if st.ClockRollbacks.Count != 0 || st.ClockRefusals != 0 || len(rec.all()) != 0 {
			t.Fatalf("%d sequence bits: spurious rollbacks: %+v, hook %+v", l.SequenceBits, st, rec.all())
		}
		if l == narrowLayout && st.SequenceWaits.Count == 0 {
			t.Fatal("no wait counted at the ceiling")
		}
		t.Logf("%d sequence bits: %d waits, %v in all", l.SequenceBits, st.SequenceWaits.Count, st.SequenceWaits.Sum)
	}
}

// Minting through a whole episode, its start and end included, does not allocate
// (with no hook: the hook's own allocations are the caller's).
func TestRollbackDoesNotAllocate(t *testing.T) {
	clock := newFakeClock(at(10_000))
	g := mustNew(t, DefaultLayout, 2, Options{Now: clock.Now})
	ms := int64(10_000)
	mustNext(t, g)
	allocs := testing.AllocsPerRun(200, func() {
		clock.Set(at(ms - 3))
		_, _ = g.NextID()
		ms += 2
		clock.Set(at(ms))
		_, _ = g.NextID()
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per episode", allocs)
	}
	if st := g.Stats(); st.ClockRollbacks.Count < 200 || st.ClockRollbackDurations.Count != st.ClockRollbacks.Count {
		t.Fatalf("episodes: %d started, %d ended", st.ClockRollbacks.Count, st.ClockRollbackDurations.Count)
	}
}
