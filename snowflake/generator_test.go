package snowflake

import (
	"errors"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeClock is a settable wall clock for Options.Now.
type fakeClock struct{ ns atomic.Int64 }

func newFakeClock(t time.Time) *fakeClock {
	c := &fakeClock{}
	c.Set(t)
	return c
}

func (c *fakeClock) Now() time.Time          { return time.Unix(0, c.ns.Load()).UTC() }
func (c *fakeClock) Set(t time.Time)         { c.ns.Store(t.UnixNano()) }
func (c *fakeClock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

// at is DefaultEpoch plus ms milliseconds.
func at(ms int64) time.Time { return DefaultEpoch.Add(time.Duration(ms) * time.Millisecond) }

func mustNew(t testing.TB, l Layout, node int64, opts Options) *Generator {
	t.Helper()
	g, err := New(l, node, opts)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func mustNext(t testing.TB, g *Generator) int64 {
	t.Helper()
	id, err := g.NextID()
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func decode(t testing.TB, id int64) Parts {
	t.Helper()
	p, err := DefaultLayout.Decode(id)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// exhaust mints the rest of the current millisecond's sequence.
func exhaust(t testing.TB, g *Generator) {
	t.Helper()
	for {
		if decode(t, mustNext(t, g)).Sequence == DefaultLayout.MaxSequence() {
			return
		}
	}
}

func TestNewRejects(t *testing.T) {
	if _, err := New(Layout{Epoch: DefaultEpoch, TimestampBits: 41, NodeBits: 12, SequenceBits: 11}, 0, Options{}); !errors.Is(err, ErrInvalidLayout) {
		t.Errorf("invalid layout: %v", err)
	}
	for _, node := range []int64{-1, 4096} {
		if _, err := New(DefaultLayout, node, Options{}); err == nil {
			t.Errorf("node %d accepted", node)
		}
	}
	if _, err := New(DefaultLayout, 4095, Options{}); err != nil {
		t.Errorf("node 4095: %v", err)
	}
}

func TestNextID_Fields(t *testing.T) {
	clock := newFakeClock(at(1000).Add(500 * time.Microsecond))
	g := mustNew(t, DefaultLayout, 17, Options{Now: clock.Now})
	if !g.MintedUpTo().IsZero() {
		t.Fatalf("MintedUpTo before minting = %v, want zero", g.MintedUpTo())
	}
	for seq := range int64(3) {
		p := decode(t, mustNext(t, g))
		want := Parts{Time: at(1000), Timestamp: 1000, Node: 17, Sequence: seq}
		if p != want {
			t.Fatalf("ID %d = %+v, want %+v", seq, p, want)
		}
	}
	clock.Advance(2 * time.Millisecond)
	if p := decode(t, mustNext(t, g)); p.Timestamp != 1002 || p.Sequence != 0 {
		t.Fatalf("after 2 ms: %+v, want timestamp 1002 sequence 0", p)
	}
	if got := g.MintedUpTo(); !got.Equal(at(1002)) {
		t.Fatalf("MintedUpTo = %v, want %v", got, at(1002))
	}
	if g.Node() != 17 || g.Layout() != DefaultLayout {
		t.Fatal("accessors")
	}
}

func TestSequenceExhaustionWaitsForNextMillisecond(t *testing.T) {
	clock := newFakeClock(at(5000))
	g := mustNew(t, DefaultLayout, 1, Options{Now: clock.Now})
	exhaust(t, g)
	go func() {
		time.Sleep(20 * time.Millisecond)
		clock.Advance(time.Millisecond)
	}()
	start := time.Now()
	p := decode(t, mustNext(t, g))
	if p.Timestamp != 5001 || p.Sequence != 0 {
		t.Fatalf("after exhaustion: %+v, want timestamp 5001 sequence 0", p)
	}
	if waited := time.Since(start); waited < 15*time.Millisecond {
		t.Fatalf("returned after %v, before the clock advanced", waited)
	}
}

func TestSequenceExhaustionRealClock(t *testing.T) {
	g := mustNew(t, DefaultLayout, 3, Options{})
	const n = 5000
	prev := int64(-1)
	perMs := map[int64]int64{}
	for range n {
		id := mustNext(t, g)
		if id <= prev {
			t.Fatalf("ID %d not above previous %d", id, prev)
		}
		prev = id
		perMs[decode(t, id).Timestamp]++
	}
	if len(perMs) < n/1024 {
		t.Fatalf("%d IDs in %d milliseconds", n, len(perMs))
	}
	for ms, c := range perMs {
		if c > 1024 {
			t.Fatalf("%d IDs in millisecond %d", c, ms)
		}
	}
}

func TestFrozenClockStallIsBounded(t *testing.T) {
	clock := newFakeClock(at(7000))
	g := mustNew(t, DefaultLayout, 1, Options{Now: clock.Now, MaxBackwardStep: 10 * time.Millisecond})
	exhaust(t, g)
	start := time.Now()
	_, err := g.NextID()
	waited := time.Since(start)
	if !errors.Is(err, ErrClockStalled) {
		t.Fatalf("frozen clock: %v, want ErrClockStalled", err)
	}
	if min := 10*time.Millisecond + ClockStallSlack; waited < min || waited > 2*time.Second {
		t.Fatalf("waited %v, want about %v", waited, min)
	}
	if got := g.MintedUpTo(); !got.Equal(at(7000)) {
		t.Fatalf("MintedUpTo = %v after the stall, want %v", got, at(7000))
	}
}

func TestClockBackwardsSmallStepKeepsLogicalTime(t *testing.T) {
	clock := newFakeClock(at(10_000))
	g := mustNew(t, DefaultLayout, 2, Options{Now: clock.Now, MaxBackwardStep: time.Second})
	first := mustNext(t, g)
	clock.Set(at(9_500))
	second := mustNext(t, g)
	if p := decode(t, second); second <= first || p.Timestamp != 10_000 || p.Sequence != 1 {
		t.Fatalf("after a 500 ms step back: %+v (id %d, previous %d), want timestamp 10000 sequence 1", p, second, first)
	}
	// Exhausted while behind: wait for the clock to pass the last timestamp.
	exhaust(t, g)
	go func() {
		time.Sleep(20 * time.Millisecond)
		clock.Set(at(10_003))
	}()
	if p := decode(t, mustNext(t, g)); p.Timestamp != 10_003 || p.Sequence != 0 {
		t.Fatalf("after catching up: %+v, want timestamp 10003 sequence 0", p)
	}
}

func TestClockBackwardsPastBound(t *testing.T) {
	clock := newFakeClock(at(10_000))
	g := mustNew(t, DefaultLayout, 2, Options{Now: clock.Now, MaxBackwardStep: time.Second})
	before := mustNext(t, g)
	clock.Set(at(8_000).Add(-250 * time.Microsecond))
	_, err := g.NextID()
	var cbe *ClockBackwardsError
	if !errors.As(err, &cbe) || !errors.Is(err, ErrClockBackwards) {
		t.Fatalf("2 s step back: %v, want *ClockBackwardsError", err)
	}
	if want := 2*time.Second + 250*time.Microsecond; cbe.Step != want || cbe.Max != time.Second {
		t.Fatalf("error = %+v, want Step %v Max 1s", cbe, want)
	}
	clock.Set(at(10_001))
	if after := mustNext(t, g); after <= before {
		t.Fatalf("after the clock recovered: %d not above %d", after, before)
	}
}

func TestNegativeMaxBackwardStepToleratesNone(t *testing.T) {
	clock := newFakeClock(at(10_000))
	g := mustNew(t, DefaultLayout, 2, Options{Now: clock.Now, MaxBackwardStep: -1})
	mustNext(t, g)
	clock.Advance(900 * time.Microsecond) // same millisecond
	mustNext(t, g)
	clock.Set(at(9_999))
	if _, err := g.NextID(); !errors.Is(err, ErrClockBackwards) {
		t.Fatalf("1 ms step back with no tolerance: %v", err)
	}
}

func TestDefaultMaxBackwardStep(t *testing.T) {
	clock := newFakeClock(at(100_000))
	g := mustNew(t, DefaultLayout, 2, Options{Now: clock.Now})
	mustNext(t, g)
	clock.Set(at(95_000))
	mustNext(t, g)
	clock.Set(at(94_999))
	if _, err := g.NextID(); !errors.Is(err, ErrClockBackwards) {
		t.Fatalf("step of 5001 ms: %v", err)
	}
}

func TestWindow(t *testing.T) {
	clock := newFakeClock(at(1_000))
	nb := at(2_000).Add(300 * time.Microsecond) // rounds up to 2001
	ex := at(3_000).Add(700 * time.Microsecond) // rounds down to 3000
	g := mustNew(t, DefaultLayout, 5, Options{Now: clock.Now, NotBefore: nb, ExpiresAt: ex})
	if gotNB, gotEx := g.Window(); !gotNB.Equal(nb) || !gotEx.Equal(ex) {
		t.Fatalf("Window() = %v, %v", gotNB, gotEx)
	}

	for _, now := range []time.Time{at(1_000), at(2_000), at(2_000).Add(999 * time.Microsecond)} {
		clock.Set(now)
		_, err := g.NextID()
		var we *WindowError
		if !errors.Is(err, ErrBeforeWindow) || !errors.As(err, &we) || !we.NotBefore.Equal(nb) {
			t.Fatalf("at %v: %v, want *WindowError before %v", now, err, nb)
		}
	}
	clock.Set(at(2_001))
	if p := decode(t, mustNext(t, g)); p.Timestamp != 2_001 {
		t.Fatalf("first ID in the window: %+v", p)
	}
	clock.Set(at(3_000).Add(999 * time.Microsecond))
	if p := decode(t, mustNext(t, g)); p.Timestamp != 3_000 {
		t.Fatalf("last millisecond of the window: %+v", p)
	}
	// Exhausted in the last millisecond: no wait, the next one is outside.
	exhaust(t, g)
	start := time.Now()
	if _, err := g.NextID(); !errors.Is(err, ErrWindowEnded) {
		t.Fatalf("exhausted at the window's end: %v, want ErrWindowEnded", err)
	}
	if waited := time.Since(start); waited > 5*time.Millisecond {
		t.Fatalf("waited %v for a millisecond outside the window", waited)
	}
	clock.Set(at(3_001))
	var we *WindowError
	if _, err := g.NextID(); !errors.As(err, &we) || we.Err != ErrWindowEnded || !we.ExpiresAt.Equal(ex) {
		t.Fatalf("after the window: %v", err)
	}
	// A renewal moves the end.
	g.SetWindow(nb, at(60_000))
	if p := decode(t, mustNext(t, g)); p.Timestamp != 3_001 {
		t.Fatalf("after renewal: %+v", p)
	}
	// Unbounded window.
	g.SetWindow(time.Time{}, time.Time{})
	clock.Set(at(1 << 40))
	mustNext(t, g)
}

func TestWindowErrorsDoNotAllocate(t *testing.T) {
	clock := newFakeClock(at(1_000))
	g := mustNew(t, DefaultLayout, 5, Options{Now: clock.Now, NotBefore: at(2_000)})
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := g.NextID(); !errors.Is(err, ErrBeforeWindow) {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per refused call", allocs)
	}
}

func TestLayoutLifetimeEnd(t *testing.T) {
	// 20 timestamp bits: about 17 minutes from the epoch.
	l := Layout{Epoch: DefaultEpoch, TimestampBits: 20, NodeBits: 33 - 10, SequenceBits: 20}
	if err := l.Validate(); err != nil {
		t.Fatal(err)
	}
	last := l.End().Add(-time.Millisecond)
	clock := newFakeClock(last.Add(400 * time.Microsecond))
	g := mustNew(t, l, 7, Options{Now: clock.Now})
	id := mustNext(t, g)
	p, err := l.Decode(id)
	if err != nil || p.Timestamp != l.MaxTimestamp() || p.Node != 7 {
		t.Fatalf("last millisecond: %+v, %v", p, err)
	}
	// Use up the last millisecond's sequence with batches, then hit the end.
	buf := make([]int64, 1<<16)
	total := int64(1)
	for {
		n, err := g.NextIDs(buf)
		total += int64(n)
		if err != nil {
			if !errors.Is(err, ErrTimestampOutOfRange) {
				t.Fatalf("exhausted in the last millisecond: %v", err)
			}
			break
		}
	}
	if total != l.MaxSequence()+1 {
		t.Fatalf("minted %d IDs in the last millisecond, want %d", total, l.MaxSequence()+1)
	}
	clock.Set(l.End())
	if _, err := g.NextID(); !errors.Is(err, ErrTimestampOutOfRange) {
		t.Fatalf("at the end: %v", err)
	}
	clock.Set(l.Epoch.Add(-time.Hour))
	g2 := mustNew(t, l, 7, Options{Now: clock.Now})
	if _, err := g2.NextID(); !errors.Is(err, ErrTimestampOutOfRange) {
		t.Fatalf("before the epoch: %v", err)
	}
}

func TestLayoutLifetimeEndedRealClock(t *testing.T) {
	// An epoch far enough in the past that 41 bits of milliseconds have run out.
	l := DefaultLayout
	l.Epoch = time.Now().Add(-time.Duration(l.MaxTimestamp()+1)*time.Millisecond - time.Hour).Truncate(time.Millisecond)
	g := mustNew(t, l, 1, Options{})
	if _, err := g.NextID(); !errors.Is(err, ErrTimestampOutOfRange) {
		t.Fatalf("ended layout: %v, want ErrTimestampOutOfRange", err)
	}
}

func TestNextIDs(t *testing.T) {
	clock := newFakeClock(at(50_000))
	g := mustNew(t, DefaultLayout, 9, Options{Now: clock.Now, ExpiresAt: at(50_001)})
	mustNext(t, g)
	buf := make([]int64, 1500)
	go func() {
		time.Sleep(10 * time.Millisecond)
		clock.Advance(time.Millisecond)
	}()
	n, err := g.NextIDs(buf)
	if err != nil || n != len(buf) {
		t.Fatalf("NextIDs = %d, %v", n, err)
	}
	for i := 1; i < n; i++ {
		if buf[i] <= buf[i-1] {
			t.Fatalf("not ascending at %d", i)
		}
	}
	if p := decode(t, buf[1022]); p.Timestamp != 50_000 || p.Sequence != 1023 {
		t.Fatalf("buf[1022] = %+v", p)
	}
	if p := decode(t, buf[1023]); p.Timestamp != 50_001 || p.Sequence != 0 || p.Node != 9 {
		t.Fatalf("buf[1023] = %+v", p)
	}
	// The window ends at 50001: only the rest of that millisecond is left.
	n, err = g.NextIDs(buf)
	if !errors.Is(err, ErrWindowEnded) || n != 1024-(1500-1023) {
		t.Fatalf("NextIDs at the window's end = %d, %v", n, err)
	}
	if n, err := g.NextIDs(nil); n != 0 || err != nil {
		t.Fatalf("NextIDs(nil) = %d, %v", n, err)
	}
}

func TestZeroAllocs(t *testing.T) {
	g := mustNew(t, DefaultLayout, 1, Options{})
	// 5000 IDs cross several milliseconds, so the wait is measured too.
	if a := testing.AllocsPerRun(5000, func() { _, _ = g.NextID() }); a != 0 {
		t.Fatalf("NextID: %v allocations per ID", a)
	}
	buf := make([]int64, 700)
	if a := testing.AllocsPerRun(20, func() { _, _ = g.NextIDs(buf) }); a != 0 {
		t.Fatalf("NextIDs: %v allocations per batch", a)
	}
}

// checkUnique fails on a duplicate among all IDs and on a per-goroutine sequence
// that does not strictly increase.
func checkUnique(t *testing.T, perGoroutine [][]int64) int {
	t.Helper()
	seen := make(map[int64]struct{})
	for gi, ids := range perGoroutine {
		for i, id := range ids {
			if i > 0 && id <= ids[i-1] {
				t.Fatalf("goroutine %d: ID %d not above its previous %d", gi, id, ids[i-1])
			}
			if _, dup := seen[id]; dup {
				t.Fatalf("duplicate ID %d", id)
			}
			seen[id] = struct{}{}
		}
	}
	return len(seen)
}

func TestConcurrentUniqueness(t *testing.T) {
	const goroutines, perG = 8, 20_000
	g := mustNew(t, DefaultLayout, 11, Options{})
	out := make([][]int64, goroutines)
	var wg sync.WaitGroup
	for i := range goroutines {
		wg.Go(func() {
			ids := make([]int64, 0, perG)
			if i%2 == 0 {
				for range perG {
					id, err := g.NextID()
					if err != nil {
						t.Error(err)
						return
					}
					ids = append(ids, id)
				}
			} else {
				buf := make([]int64, 97)
				for len(ids) < perG {
					n, err := g.NextIDs(buf[:min(len(buf), perG-len(ids))])
					if err != nil {
						t.Error(err)
						return
					}
					ids = append(ids, buf[:n]...)
				}
			}
			out[i] = ids
		})
	}
	wg.Wait()
	if n := checkUnique(t, out); n != goroutines*perG {
		t.Fatalf("%d unique IDs, want %d", n, goroutines*perG)
	}
	if got, last := g.MintedUpTo(), decode(t, maxID(out)).Time; !got.Equal(last) {
		t.Fatalf("MintedUpTo = %v, want %v", got, last)
	}
}

func maxID(perGoroutine [][]int64) int64 {
	m := int64(math.MinInt64)
	for _, ids := range perGoroutine {
		for _, id := range ids {
			m = max(m, id)
		}
	}
	return m
}

// TestConcurrentJitteryClock drives one generator from several goroutines with a
// clock that steps back (by up to 20 ms) and forth inside the tolerated step.
func TestConcurrentJitteryClock(t *testing.T) {
	const goroutines, perG = 6, 5_000
	clock := newFakeClock(at(1_000_000))
	g := mustNew(t, DefaultLayout, 12, Options{Now: clock.Now, MaxBackwardStep: time.Second})
	stop := make(chan struct{})
	var ticker sync.WaitGroup
	ticker.Go(func() {
		for step := 0; ; step++ {
			select {
			case <-stop:
				return
			case <-time.After(200 * time.Microsecond):
			}
			if step%5 == 4 {
				clock.Advance(-20 * time.Millisecond)
			} else {
				clock.Advance(7 * time.Millisecond)
			}
		}
	})
	out := make([][]int64, goroutines)
	var wg sync.WaitGroup
	for i := range goroutines {
		wg.Go(func() {
			for range perG {
				id, err := g.NextID()
				if err != nil {
					t.Error(err)
					return
				}
				out[i] = append(out[i], id)
			}
		})
	}
	wg.Wait()
	close(stop)
	ticker.Wait()
	if n := checkUnique(t, out); n != goroutines*perG {
		t.Fatalf("%d unique IDs, want %d", n, goroutines*perG)
	}
}

func TestGeneratorsOnDistinctNodesNeverCollide(t *testing.T) {
	const nodes, perG = 4, 10_000
	out := make([][]int64, nodes)
	var wg sync.WaitGroup
	for i := range nodes {
		g := mustNew(t, DefaultLayout, int64(i), Options{})
		wg.Go(func() {
			for range perG {
				out[i] = append(out[i], mustNext(t, g))
			}
		})
	}
	wg.Wait()
	checkUnique(t, out)
}

// TestSetWindowConcurrent flips the window while goroutines mint. Every ID must lie
// in one of the two windows, and once a window that has ended is set and SetWindow
// has returned, no call started afterwards mints.
func TestSetWindowConcurrent(t *testing.T) {
	clock := newFakeClock(at(20_000))
	open := [2]time.Time{at(10_000), at(30_000)}
	g := mustNew(t, DefaultLayout, 3, Options{Now: clock.Now, NotBefore: open[0], ExpiresAt: open[1]})
	var minted, refused atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				id, err := g.NextID()
				switch {
				case err == nil:
					if ts := decode(t, id).Timestamp; ts < 10_000 || ts > 30_000 {
						t.Errorf("ID at %d outside every window", ts)
					}
					minted.Add(1)
				case errors.Is(err, ErrWindowEnded) || errors.Is(err, ErrBeforeWindow):
					refused.Add(1)
				default:
					t.Error(err)
				}
			}
		})
	}
	for minted.Load() == 0 {
		runtime.Gosched()
	}
	for i := range 2_000 {
		runtime.Gosched()
		if i%2 == 0 {
			g.SetWindow(at(1_000), at(15_000)) // ended
		} else {
			g.SetWindow(open[0], open[1])
		}
		if i%100 == 0 {
			clock.Advance(time.Millisecond)
		}
	}
	g.SetWindow(at(1_000), at(15_000))
	after := minted.Load()
	time.Sleep(5 * time.Millisecond)
	mintedAfterClose := minted.Load() - after
	close(stop)
	wg.Wait()
	// Calls in flight when SetWindow returned may still finish; at most one each.
	if mintedAfterClose > 4 {
		t.Fatalf("%d IDs minted after the window ended", mintedAfterClose)
	}
	if minted.Load() == 0 || refused.Load() == 0 {
		t.Fatalf("minted %d, refused %d: the test did not exercise both windows", minted.Load(), refused.Load())
	}
}
