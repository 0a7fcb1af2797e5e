package client_test

import (
	"errors"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/client"
	"github.com/idkeeper/idkeeper/client/clienttest"
	"github.com/idkeeper/idkeeper/snowflake"
)

// countingClock counts wall-clock reads, to tell when a generator is waiting.
type countingClock struct {
	*clienttest.Clock
	reads atomic.Int64
}

func (c *countingClock) Now() time.Time {
	c.reads.Add(1)
	return c.Clock.Now()
}

// Close blocks new issuing, waits for the call in flight, and only then sends
// Remove, whose mintedUpTo covers the ID that call minted.
func TestCloseDrainsInFlightCallBeforeRemove(t *testing.T) {
	e := newEnv(t, idkeeper.Config{})
	cc := &countingClock{Clock: e.clk}
	cfg := e.config()
	cfg.Clock = cc
	cfg.MaxBackwardStep = 3 * time.Second // bounds the generator's wait for the frozen clock
	s := e.open(cfg)

	if err := s.NextIDs(make([]int64, 1024)); err != nil { // the millisecond's whole sequence
		t.Fatal(err)
	}
	type result struct {
		id  int64
		err error
	}
	inFlight := make(chan result, 1)
	reads := cc.reads.Load()
	go func() {
		id, err := s.NextID()
		inFlight <- result{id, err}
	}()
	// The caller waits for the next millisecond, reading the clock as it goes.
	for deadline := time.Now().Add(wait); cc.reads.Load() < reads+3; {
		if time.Now().After(deadline) {
			t.Fatal("the caller did not start waiting")
		}
		time.Sleep(time.Millisecond)
	}
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	for deadline := time.Now().Add(wait); ; {
		if err := s.Check(); errors.Is(err, client.ErrClosed) { // mints nothing
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("Close did not block issuing")
		}
		time.Sleep(time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond) // Remove must not go out while the call is in flight
	if n := e.proxy.count(removePath); n != 0 {
		t.Fatalf("Remove sent while a NextID was in flight")
	}
	select {
	case <-closed:
		t.Fatal("Close returned before the drain")
	default:
	}

	e.clk.Advance(time.Millisecond) // the waiting caller mints in the next millisecond
	r := <-inFlight
	if r.err != nil {
		t.Fatalf("the drained call failed: %v", r.err)
	}
	if p, _ := idkeeper.DefaultLayout.Decode(r.id); !p.Time.Equal(t0.Add(time.Millisecond)) {
		t.Fatalf("drained ID at %v, want t0+1ms", p.Time)
	}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	rm := e.proxy.requests(removePath)
	if len(rm) != 1 || rm[0]["mintedUpTo"] != "2026-03-01T12:00:00.001Z" {
		t.Fatalf("Remove %v, want mintedUpTo t0+1ms: the drained call's ID", rm)
	}
}

// Many callers race with Close: no duplicate, every ID at or below the mintedUpTo
// that Remove carries, and nothing issued once Close has returned.
func TestCloseWithConcurrentCallers(t *testing.T) {
	e := newEnv(t, idkeeper.Config{})
	cfg := e.config()
	cfg.Count = 2
	s := e.open(cfg)

	stop := make(chan struct{})
	var ticker sync.WaitGroup
	ticker.Go(func() { // the clock moves on, so that the sequence never runs dry for long
		for i := 0; i < 200_000; i++ {
			select {
			case <-stop:
				return
			default:
			}
			e.clk.Advance(time.Millisecond)
			time.Sleep(20 * time.Microsecond)
		}
	})
	var workers sync.WaitGroup
	ids := make([][]int64, 8)
	var started atomic.Int64
	for w := range ids {
		workers.Go(func() {
			for i := 0; i < 50_000; i++ {
				id, err := s.NextID()
				if errors.Is(err, client.ErrClosed) {
					return
				}
				if err != nil {
					t.Errorf("NextID: %v", err)
					return
				}
				ids[w] = append(ids[w], id)
				started.Add(1)
			}
		})
	}
	for deadline := time.Now().Add(wait); started.Load() < 2000 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.NextID(); !errors.Is(err, client.ErrClosed) {
		t.Fatalf("NextID after Close: %v", err)
	}
	workers.Wait()
	close(stop)
	ticker.Wait()

	rm := e.proxy.requests(removePath)
	if len(rm) != 1 {
		t.Fatalf("%d Remove, want 1", len(rm))
	}
	upTo, err := time.Parse(time.RFC3339Nano, rm[0]["mintedUpTo"].(string))
	if err != nil {
		t.Fatal(err)
	}
	all := slices.Concat(ids...)
	if len(all) < 2000 {
		t.Fatalf("only %d IDs minted", len(all))
	}
	slices.Sort(all)
	if len(slices.Compact(slices.Clone(all))) != len(all) {
		t.Fatal("duplicate IDs")
	}
	top, _ := idkeeper.DefaultLayout.Decode(all[len(all)-1])
	if top.Time.After(upTo) {
		t.Fatalf("an ID at %v lies after mintedUpTo %v", top.Time, upTo)
	}
	if !top.Time.Equal(upTo) {
		t.Errorf("mintedUpTo %v is not the latest minted time %v", upTo, top.Time)
	}
}

// NextIDs returns ascending IDs spread over the generators; NextID goes round robin;
// Generator(i) pins node ID i.
func TestIssuingOverSeveralGenerators(t *testing.T) {
	e := newEnv(t, idkeeper.Config{})
	cfg := e.config()
	cfg.Count = 3
	s := e.open(cfg)
	leases := s.Leases()
	layout := s.Layout()

	buf := make([]int64, 3000) // three generators hold 3 × 1024 in one millisecond
	if err := s.NextIDs(buf); err != nil {
		t.Fatal(err)
	}
	nodes := map[int64]int{}
	for i, id := range buf {
		if i > 0 && id <= buf[i-1] {
			t.Fatalf("NextIDs not strictly ascending at %d", i)
		}
		p, _ := layout.Decode(id)
		nodes[p.Node]++
	}
	if len(nodes) != 3 {
		t.Fatalf("NextIDs used node IDs %v, want all three", nodes)
	}

	e.clk.Advance(time.Millisecond)
	var order []int64
	for range 6 {
		id, err := s.NextID()
		if err != nil {
			t.Fatal(err)
		}
		p, _ := layout.Decode(id)
		order = append(order, p.Node)
	}
	for i := 3; i < 6; i++ {
		if order[i] != order[i-3] || order[i] == order[i-1] {
			t.Fatalf("NextID node order %v is not round robin", order)
		}
	}

	for i, l := range leases {
		g := s.Generator(i)
		if g.NodeID() != l.NodeID {
			t.Fatalf("Generator(%d).NodeID = %d, want %d", i, g.NodeID(), l.NodeID)
		}
		var last int64
		for range 5 {
			id, err := g.NextID()
			if err != nil {
				t.Fatal(err)
			}
			if p, _ := layout.Decode(id); p.Node != l.NodeID || id <= last {
				t.Fatalf("Generator(%d) minted %d (node %d) after %d", i, id, p.Node, last)
			}
			last = id
		}
		batch := make([]int64, 10)
		if err := g.NextIDs(batch); err != nil || !slices.IsSorted(batch) || batch[0] <= last {
			t.Fatalf("Generator(%d).NextIDs = %v, %v", i, batch, err)
		}
	}
	if s.NumGenerators() != 3 {
		t.Errorf("NumGenerators = %d", s.NumGenerators())
	}
}

// The clock stepping back within MaxBackwardStep keeps issuing (logical time); past
// it issuing is refused with ErrClockBackwards, never spinning.
func TestClockStepBack(t *testing.T) {
	e := newEnv(t, idkeeper.Config{})
	cfg := e.config()
	cfg.MaxBackwardStep = time.Second
	s := e.open(cfg)
	e.clk.Advance(10 * time.Second)
	first, err := s.NextID()
	if err != nil {
		t.Fatal(err)
	}
	e.clk.StepWall(-500 * time.Millisecond)
	id, err := s.NextID()
	if err != nil || id <= first {
		t.Fatalf("after a small step back: %d, %v; want an ID above %d", id, err, first)
	}
	if err := s.Check(); err != nil {
		t.Fatalf("Check after a small step back: %v", err)
	}
	e.clk.StepWall(-time.Second)
	if _, err := s.NextID(); !errors.Is(err, snowflake.ErrClockBackwards) {
		t.Fatalf("after a large step back: %v, want ErrClockBackwards", err)
	}
	// Health agrees with issuing, and recovers with the clock.
	var cbe *snowflake.ClockBackwardsError
	if err := s.Check(); !errors.As(err, &cbe) || cbe.Max != time.Second || cbe.Step != 1500*time.Millisecond {
		t.Fatalf("Check after a large step back: %v, want a *ClockBackwardsError of 1.5s (tolerated: 1s)", err)
	}
	e.clk.StepWall(time.Second)
	if err := s.Check(); err != nil {
		t.Fatalf("Check with the clock back within the step: %v", err)
	}
	if id2, err := s.NextID(); err != nil || id2 <= id {
		t.Fatalf("with the clock back within the step: %d, %v; want an ID above %d", id2, err, id)
	}
}

// Stats reports IDs minted, exhausted sequences, refused backward steps, the
// generator's rollback and wait histograms, lease time left and health (package
// clientmetrics exports them to Prometheus).
func TestStats(t *testing.T) {
	e := newEnv(t, idkeeper.Config{})
	cfg := e.config()
	cfg.Count = 2
	cfg.MaxBackwardStep = time.Second
	s, err := client.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); len(st.Generators) != 0 || st.Healthy || st.TimeLeft != 0 {
		t.Fatalf("before Open: %+v", st)
	}
	if g := s.Generator(0).Stats(); !reflect.DeepEqual(g, client.GeneratorStats{NodeID: -1}) {
		t.Fatalf("generator before Open: %+v", g)
	}
	s.Close()
	s = e.open(cfg)

	if err := s.Generator(0).NextIDs(make([]int64, 1024)); err != nil { // one whole millisecond
		t.Fatal(err)
	}
	if _, err := s.Generator(1).NextID(); err != nil {
		t.Fatal(err)
	}
	e.clk.StepWall(-2 * time.Second)
	if _, err := s.Generator(1).NextID(); !errors.Is(err, snowflake.ErrClockBackwards) {
		t.Fatal(err)
	}
	e.clk.Advance(time.Hour)
	n0, n1 := s.Leases()[0].NodeID, s.Leases()[1].NodeID
	want := client.Stats{
		Generators: []client.GeneratorStats{
			{NodeID: n0, Minted: 1024, SequenceExhausted: 1},
			{NodeID: n1, Minted: 1, ClockBackwards: 1, InRollback: true},
		},
		TimeLeft: lease - time.Hour,
		Healthy:  true,
		Demand:   client.DemandStats{NodeIDs: 2},
		// Open's Alloc and Renew, to the one URL.
		Replicas: []client.ReplicaStats{{URL: e.url, Requests: 2, Current: true}},
	}
	// The step back of node n1 is one rollback of 2 s, found by the refused call;
	// no call has minted since, so it has not ended. Nobody waited.
	wantHists := [][3]uint64{{0, 0, 0}, {1, 0, 0}}
	got := s.Stats()
	for i := range got.Generators {
		g := &got.Generators[i]
		if h := [3]uint64{g.ClockRollbacks.Count, g.ClockRollbackDurations.Count, g.SequenceWaits.Count}; h != wantHists[i] {
			t.Errorf("generator %d: rollbacks, rollback durations, waits = %v, want %v", i, h, wantHists[i])
		}
		g.ClockRollbacks, g.ClockRollbackDurations, g.SequenceWaits = snowflake.Histogram{}, snowflake.Histogram{}, snowflake.Histogram{}
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("stats\n got %+v\nwant %+v", got, want)
	}
	if h := s.Generator(1).Stats().ClockRollbacks; h.Sum <= 2*time.Second-time.Millisecond || h.Sum > 2*time.Second {
		t.Errorf("generator 1: rollback width %v, want 2s (at millisecond resolution)", h.Sum)
	}
	s.Close()
	got = s.Stats()
	if got.Healthy || got.TimeLeft != 0 || len(got.Generators) != 2 || got.Generators[1].ClockBackwards != 1 {
		t.Errorf("after Close: %+v", got)
	}
}
