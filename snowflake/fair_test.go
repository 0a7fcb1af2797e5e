package snowflake

import (
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// waitClaimed waits until the generator's state has moved past prev (a call has
// claimed) and returns the new state.
func waitClaimed(t *testing.T, g *Generator, prev int64) int64 {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if s := g.state.Load(); s != prev {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatal("no claim within 5 s")
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// Batches that must wait for later milliseconds are served in the order they
// claimed: each gets the range right after the previous one, and none gets an ID
// from an earlier millisecond than one that claimed before it, even though all of
// them wake up at once when the clock moves.
func TestFairWaitingFIFO(t *testing.T) {
	clock := newFakeClock(at(5_000))
	g := mustNew(t, DefaultLayout, 6, Options{Now: clock.Now})
	exhaust(t, g)
	const batches, size = 12, 700
	out := make([][]int64, batches)
	errs := make([]error, batches)
	var wg sync.WaitGroup
	state := g.state.Load()
	for i := range batches {
		out[i] = make([]int64, size)
		wg.Go(func() { _, errs[i] = g.NextIDs(out[i]) })
		// The next batch arrives only once this one has claimed.
		next := waitClaimed(t, g, state)
		if got := next - state; got != size {
			t.Fatalf("batch %d claimed %d values in its step, want %d", i, got, size)
		}
		state = next
	}
	if got, want := g.MintedUpTo(), at(5_000+(batches*size+1023)/1024); !got.Equal(want) {
		t.Fatalf("MintedUpTo with the queue = %v, want %v (the last claimed millisecond)", got, want)
	}
	// Every batch still waits: the clock has not moved.
	for i := range batches {
		if out[i][size-1] != 0 {
			t.Fatalf("batch %d returned before the clock reached its millisecond", i)
		}
	}
	clock.Advance(time.Duration(batches*size/1024+2) * time.Millisecond)
	wg.Wait()
	for i := range batches {
		if errs[i] != nil {
			t.Fatalf("batch %d: %v", i, errs[i])
		}
		if i > 0 {
			prevLast, first := decode(t, out[i-1][size-1]), decode(t, out[i][0])
			if first.Timestamp < prevLast.Timestamp || out[i][0] <= out[i-1][size-1] {
				t.Fatalf("batch %d starts at %+v, before batch %d's end %+v", i, first, i-1, prevLast)
			}
			// Consecutive ranges: the sequence continues where the previous ended.
			want := prevLast.Sequence + 1
			if want == 1024 {
				want = 0
			}
			if first.Sequence != want {
				t.Fatalf("batch %d starts at sequence %d, want %d", i, first.Sequence, want)
			}
		}
	}
	if n := checkUnique(t, out); n != batches*size {
		t.Fatalf("%d unique IDs, want %d", n, batches*size)
	}
	if st := g.Stats(); st.ClockRollbacks.Count != 0 || st.ClockRefusals != 0 {
		t.Fatalf("queueing counted as a backward step: %+v", st)
	}
}

// Many goroutines mixing NextID and NextIDs of every size on the system clock: no
// duplicate, strictly increasing per goroutine, and no ID returned before the clock
// (read after the call returned) has reached its millisecond.
func TestFairHeavyConcurrency(t *testing.T) {
	const goroutines = 16
	target, budget := int64(3_000_000), 6*time.Second
	if testing.Short() {
		target, budget = 500_000, 2*time.Second
	}
	g := mustNew(t, DefaultLayout, 13, Options{})
	var total atomic.Int64
	out := make([][]int64, goroutines)
	deadline := time.Now().Add(budget)
	var wg sync.WaitGroup
	for i := range goroutines {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(i), 1))
			buf := make([]int64, 3000)
			var ids []int64
			for total.Load() < target && time.Now().Before(deadline) {
				var got []int64
				if i%4 == 0 {
					for range 64 {
						id, err := g.NextID()
						if err != nil {
							t.Error(err)
							return
						}
						buf[len(got)] = id
						got = buf[:len(got)+1]
					}
				} else {
					n := 1 + r.IntN(len(buf))
					if r.IntN(4) == 0 {
						n = 1 + r.IntN(20)
					}
					k, err := g.NextIDs(buf[:n])
					if err != nil || k != n {
						t.Errorf("NextIDs(%d) = %d, %v", n, k, err)
						return
					}
					got = buf[:n]
				}
				nowTS := time.Now().UnixMilli() - DefaultLayout.EpochMillis()
				if ts := decode(t, got[len(got)-1]).Timestamp; ts > nowTS {
					t.Errorf("ID of millisecond %d returned at %d", ts, nowTS)
					return
				}
				ids = append(ids, got...)
				total.Add(int64(len(got)))
			}
			out[i] = ids
		})
	}
	wg.Wait()
	all := make([]int64, 0, total.Load())
	for gi, ids := range out {
		for j := 1; j < len(ids); j++ {
			if ids[j] <= ids[j-1] {
				t.Fatalf("goroutine %d: ID %d not above its previous %d", gi, ids[j], ids[j-1])
			}
		}
		all = append(all, ids...)
	}
	slices.Sort(all)
	for j := 1; j < len(all); j++ {
		if all[j] == all[j-1] {
			t.Fatalf("duplicate ID %d", all[j])
		}
	}
	if got, last := g.MintedUpTo(), decode(t, all[len(all)-1]).Time; got.Before(last) {
		t.Fatalf("MintedUpTo = %v, below the last ID's %v", got, last)
	}
	if st := g.Stats(); st.ClockRollbacks.Count != 0 || st.ClockRefusals != 0 {
		t.Fatalf("spurious rollbacks: %+v", st)
	}
	t.Logf("%d IDs from %d goroutines", len(all), goroutines)
}

// A claim that would cross the window's end takes only what fits, and no claim ever
// reaches past it, however many callers queue.
func TestFairClaimsStopAtWindowEnd(t *testing.T) {
	clock := newFakeClock(at(1_000))
	g := mustNew(t, DefaultLayout, 2, Options{Now: clock.Now, ExpiresAt: at(1_002).Add(500 * time.Microsecond)})
	buf := make([]int64, 5000)
	done := make(chan struct{})
	var n int
	var err error
	go func() {
		defer close(done)
		n, err = g.NextIDs(buf)
	}()
	waitClaimed(t, g, -1)
	if got := g.MintedUpTo(); !got.Equal(at(1_002)) {
		t.Fatalf("claimed up to %v, want the window's last millisecond %v", got, at(1_002))
	}
	clock.Set(at(1_002))
	<-done
	if !errors.Is(err, ErrWindowEnded) || n != 3*1024 {
		t.Fatalf("NextIDs across the window's end = %d, %v; want %d, ErrWindowEnded", n, err, 3*1024)
	}
	for _, id := range buf[:n] {
		if ts := decode(t, id).Timestamp; ts > 1_002 {
			t.Fatalf("ID at %d past the window", ts)
		}
	}

	// Many callers, the clock advancing: nothing past the end, ever.
	clock.Set(at(2_000))
	g = mustNew(t, DefaultLayout, 2, Options{Now: clock.Now, ExpiresAt: at(2_010)})
	stop := make(chan struct{})
	var ticker sync.WaitGroup
	ticker.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(300 * time.Microsecond):
				clock.Advance(time.Millisecond)
			}
		}
	})
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			b := make([]int64, 100+i*250)
			for {
				k, err := g.NextIDs(b)
				for _, id := range b[:k] {
					if ts := decode(t, id).Timestamp; ts > 2_010 {
						t.Errorf("ID at %d past the window", ts)
						return
					}
				}
				if err != nil {
					if !errors.Is(err, ErrWindowEnded) {
						t.Error(err)
					}
					return
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	ticker.Wait()
	if got := g.MintedUpTo(); got.After(at(2_010)) {
		t.Fatalf("claimed up to %v, past the window", got)
	}
}

// Claims queued ahead of the clock are no backward step: with no tolerance at all
// (MaxBackwardStep < 0), a caller that reads the clock behind the queue is neither
// counted nor refused, and ClockError stays nil.
func TestFairQueueIsNoRollback(t *testing.T) {
	var rec steps
	clock := newFakeClock(at(9_000))
	g := mustNew(t, DefaultLayout, 4, Options{Now: clock.Now, MaxBackwardStep: -1, OnClockStep: rec.add})
	g.maxWait = 10 * time.Second // the clock is frozen: a slow machine must not make the waiters stall
	exhaust(t, g)
	var wg sync.WaitGroup
	state := g.state.Load()
	for range 4 {
		wg.Go(func() {
			buf := make([]int64, 1024)
			if _, err := g.NextIDs(buf); err != nil {
				t.Error(err)
			}
		})
		state = waitClaimed(t, g, state)
	}
	if got := g.MintedUpTo(); !got.Equal(at(9_004)) {
		t.Fatalf("queue reaches %v, want %v", got, at(9_004))
	}
	if err := g.ClockError(clock.Now()); err != nil {
		t.Fatalf("ClockError with the queue ahead: %v", err)
	}
	// A caller arriving now joins the queue behind the others.
	res := make(chan error, 1)
	go func() {
		id, err := g.NextID()
		if err == nil && decode(t, id).Timestamp != 9_005 {
			err = errors.New("not behind the queue")
		}
		res <- err
	}()
	waitClaimed(t, g, state)
	clock.Advance(5 * time.Millisecond)
	wg.Wait()
	if err := <-res; err != nil {
		t.Fatal(err)
	}
	st := g.Stats()
	if st.ClockRollbacks.Count != 0 || st.ClockRefusals != 0 || st.InRollback || len(rec.all()) != 0 {
		t.Fatalf("queueing counted as a backward step: %+v, hook %+v", st, rec.all())
	}
	if st.SequenceWaits.Count != 5 {
		t.Fatalf("%d waits counted, want 5", st.SequenceWaits.Count)
	}

	// The same on the system clock, at the ceiling: 16 callers of 1,000 keep the
	// queue about 16 ms ahead of the clock.
	g = mustNew(t, DefaultLayout, 4, Options{MaxBackwardStep: -1, OnClockStep: rec.add})
	deadline := time.Now().Add(300 * time.Millisecond)
	for range 16 {
		wg.Go(func() {
			buf := make([]int64, 1000)
			for time.Now().Before(deadline) {
				if _, err := g.NextIDs(buf); err != nil {
					t.Error(err)
					return
				}
				if err := g.ClockError(time.Now()); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if st := g.Stats(); st.ClockRollbacks.Count != 0 || st.ClockRefusals != 0 || len(rec.all()) != 0 {
		t.Fatalf("system clock, queue ahead: spurious rollbacks %+v, hook %+v", st, rec.all())
	}
}

// A real backward step while callers are queued ahead is still found, against the
// highest clock reading, and refused past the tolerated step.
func TestFairRealStepWithQueue(t *testing.T) {
	clock := newFakeClock(at(20_000))
	g := mustNew(t, DefaultLayout, 4, Options{Now: clock.Now, MaxBackwardStep: 100 * time.Millisecond})
	g.maxWait = 10 * time.Second // the clock is frozen: a slow machine must not make the waiter stall
	exhaust(t, g)
	var wg sync.WaitGroup
	before := g.state.Load()
	wg.Go(func() {
		if _, err := g.NextIDs(make([]int64, 3000)); err != nil {
			t.Error(err)
		}
	})
	waitClaimed(t, g, before)
	clock.Set(at(19_800)) // 200 ms back: refused
	if _, err := g.NextID(); !errors.Is(err, ErrClockBackwards) {
		t.Fatalf("200 ms back with a queue: %v", err)
	}
	var cbe *ClockBackwardsError
	if err := g.ClockError(clock.Now()); !errors.As(err, &cbe) || cbe.Step != 200*time.Millisecond {
		t.Fatalf("ClockError = %v, want a 200 ms step", err)
	}
	if st := g.Stats(); st.ClockRollbacks.Count != 1 || st.ClockRefusals != 1 || !st.InRollback {
		t.Fatalf("stats: %+v", st)
	}
	clock.Set(at(20_010))
	wg.Wait()
	if st := g.Stats(); st.InRollback || st.ClockRollbackDurations.Count != 1 {
		t.Fatalf("after catching up: %+v", st)
	}
}

// A claim reaches at most MaxQueueAhead past the clock: a huge batch is cut there.
func TestFairQueueAheadIsBounded(t *testing.T) {
	clock := newFakeClock(at(30_000))
	g := mustNew(t, DefaultLayout, 4, Options{Now: clock.Now, MaxBackwardStep: 5 * time.Second})
	mustNext(t, g)
	done := make(chan struct{})
	var n int
	var err error
	buf := make([]int64, 2*1024*int(maxAheadMs))
	before := g.state.Load()
	go func() {
		defer close(done)
		n, err = g.NextIDs(buf)
	}()
	waitClaimed(t, g, before)
	if got, want := g.MintedUpTo(), at(30_000+maxAheadMs); !got.Equal(want) {
		t.Fatalf("claimed up to %v, want %v", got, want)
	}
	// The rest is claimed once the clock has moved on.
	for stop := false; !stop; {
		select {
		case <-done:
			stop = true
		case <-time.After(time.Millisecond):
			clock.Advance(100 * time.Millisecond)
		}
	}
	if err != nil || n != len(buf) {
		t.Fatalf("NextIDs = %d, %v", n, err)
	}
}

// A stalled clock gives a claim back when nobody claimed after it.
func TestFairStallGivesClaimBack(t *testing.T) {
	clock := newFakeClock(at(7_000))
	g := mustNew(t, DefaultLayout, 1, Options{Now: clock.Now, MaxBackwardStep: 5 * time.Millisecond})
	exhaust(t, g)
	if n, err := g.NextIDs(make([]int64, 3000)); !errors.Is(err, ErrClockStalled) || n != 0 {
		t.Fatalf("frozen clock: %d, %v", n, err)
	}
	if got := g.MintedUpTo(); !got.Equal(at(7_000)) {
		t.Fatalf("MintedUpTo = %v after the stall, want %v", got, at(7_000))
	}
}
