package client_test

import (
	"context"
	"errors"
	"math"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/client"
	"github.com/idkeeper/idkeeper/protocol"
)

// load is a utilisation source on the env's fake clock: IDs minted at a rate the
// test sets, in IDs per second, integrated over Mono.
type load struct {
	e    *env
	rate atomic.Uint64 // float64 bits
	base atomic.Uint64 // IDs counted before the last rate change
	at   atomic.Int64  // Mono of the last rate change
}

func newLoad(e *env) *load { return &load{e: e} }

func (l *load) total() uint64 {
	r := math.Float64frombits(l.rate.Load())
	return l.base.Load() + uint64(r*(l.e.clk.Mono()-time.Duration(l.at.Load())).Seconds())
}

// set changes the rate from now on; call it between Advances.
func (l *load) set(idsPerSecond float64) {
	l.base.Store(l.total())
	l.at.Store(int64(l.e.clk.Mono()))
	l.rate.Store(math.Float64bits(idsPerSecond))
}

const perNode = 1_024_000 // the default layout's IDs per second per node ID

// openOnDemand opens a session of count node IDs leasing up to maxCount on demand,
// measured by the load l.
func (e *env) openOnDemand(count, maxCount int, l *load, edit func(*client.Config)) *client.Session {
	e.t.Helper()
	cfg := e.config()
	cfg.Count, cfg.MaxCount = count, maxCount
	if edit != nil {
		edit(&cfg)
	}
	s, err := client.New(cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	client.SetDemandSource(s, l.total)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := s.Open(ctx); err != nil {
		e.t.Fatalf("Open: %v", err)
	}
	e.t.Cleanup(func() { s.Close() })
	return s
}

// step advances the clock by one sample and waits for a grow it started.
func (e *env) step(s *client.Session) {
	e.t.Helper()
	e.clk.Advance(time.Second)
	deadline := time.Now().Add(wait)
	for client.DemandBusy(s) {
		if time.Now().After(deadline) {
			e.t.Fatal("a grow did not finish")
		}
		time.Sleep(time.Millisecond)
	}
}

// waitFor polls cond in real time.
func (e *env) waitFor(what string, cond func() bool) {
	e.t.Helper()
	deadline := time.Now().Add(wait)
	for !cond() {
		if time.Now().After(deadline) {
			e.t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// requesters returns the distinct requesters (instances) of the store's leases.
func (e *env) requesters() map[string]int {
	m := map[string]int{}
	for _, l := range e.storeLeases() {
		m[l.Requester.Key()]++
	}
	return m
}

// Under load a session grows 1 → 2 → 4 (doubling, never above MaxCount), each
// batch a real lease of its own requester in the registry, and spreads issuing
// over all of them; idle, it gives the batches back one a minute (Remove with
// mintedUpTo) and never goes below Count; Close releases all.
func TestDemandGrowsAndShrinks(t *testing.T) {
	e := newEnv(t, idkeeper.Config{})
	l := newLoad(e)
	s := e.openOnDemand(1, 4, l, nil)
	if n := s.NumNodeIDs(); n != 1 {
		t.Fatalf("NumNodeIDs = %d at start, want 1", n)
	}

	var seen []int
	for i := 0; i < 30; i++ {
		l.set(0.95 * perNode * float64(s.NumNodeIDs())) // at the ceiling, whatever is held
		e.step(s)
		if n := s.NumNodeIDs(); len(seen) == 0 || seen[len(seen)-1] != n {
			seen = append(seen, n)
		}
		if i == 1 && s.NumNodeIDs() != 1 {
			t.Fatalf("grew after %d samples, want 3 of 6 hot first", i+1)
		}
	}
	if !slices.Equal(seen, []int{1, 2, 4}) {
		t.Fatalf("node IDs held over the samples: %v, want [1 2 4]", seen)
	}
	if st := s.Stats(); st.Demand.NodeIDs != 4 || st.Demand.Grows != 2 || st.Demand.Shrinks != 0 || len(st.Generators) != 4 {
		t.Fatalf("Stats: %+v", st.Demand)
	}
	if s.NumGenerators() != 1 {
		t.Fatalf("NumGenerators = %d, want Count (1)", s.NumGenerators())
	}
	// Real leases: 4 node IDs under 3 requesters (the session's and one per batch).
	reqs := e.requesters()
	if len(e.storeLeases()) != 4 || len(reqs) != 3 || reqs[s.Requester().Key()] != 1 {
		t.Fatalf("registry leases by requester: %v", reqs)
	}
	for _, want := range []string{"grew to 2 node IDs", "grew to 4 node IDs"} {
		if e.logs.count(want) != 1 {
			t.Fatalf("log lacks %q:\n%s", want, e.logs)
		}
	}

	// Issuing spreads over all four node IDs: a batch of 4 chunks, and NextIDsOn.
	layout := s.Layout()
	nodes := map[int64]bool{}
	ids := make([]int64, 4000)
	if err := s.NextIDs(ids); err != nil {
		t.Fatal(err)
	}
	if !slices.IsSorted(ids) {
		t.Fatal("NextIDs not sorted")
	}
	for _, id := range ids {
		p, _ := layout.Decode(id)
		nodes[p.Node] = true
	}
	for i := range 4 {
		one := make([]int64, 10)
		if err := s.NextIDsOn(i, one); err != nil {
			t.Fatal(err)
		}
		p, _ := layout.Decode(one[0])
		nodes[p.Node] = true
		if _, err := s.NextID(); err != nil {
			t.Fatal(err)
		}
	}
	if len(nodes) != 4 {
		t.Fatalf("minted on node IDs %v, want all 4", nodes)
	}

	// Idle: one batch back after 60 s below 30 %, the next after another 60 s, then
	// never below Count.
	l.set(0)
	removes := e.proxy.count(removePath)
	seen = seen[:0]
	for range 200 {
		e.step(s)
		if n := s.NumNodeIDs(); len(seen) == 0 || seen[len(seen)-1] != n {
			seen = append(seen, n)
		}
	}
	if !slices.Equal(seen, []int{4, 2, 1}) {
		t.Fatalf("node IDs held while idle: %v, want [4 2 1]", seen)
	}
	e.waitFor("the batches' Removes", func() bool { return len(e.storeLeases()) == 1 })
	if got := e.requesters(); got[s.Requester().Key()] != 1 {
		t.Fatalf("the session's own lease is gone: %v", got)
	}
	rm := e.proxy.requests(removePath)[removes:]
	if len(rm) != 2 {
		t.Fatalf("%d Removes while shrinking, want 2", len(rm))
	}
	for _, r := range rm {
		if r["mintedUpTo"] == nil {
			t.Fatalf("a Remove without mintedUpTo: %v", r)
		}
	}
	if st := s.Stats(); st.Demand.NodeIDs != 1 || st.Demand.Shrinks != 2 {
		t.Fatalf("Stats: %+v", st.Demand)
	}
	if e.logs.count("shrank to 2 node IDs") != 1 || e.logs.count("shrank to 1 node IDs") != 1 {
		t.Fatalf("shrinks not logged:\n%s", e.logs)
	}
	if _, err := s.NextID(); err != nil {
		t.Fatal(err)
	}
	e.expectNoFatal()

	// Close releases every batch too.
	for range 4 {
		l.set(0.95 * perNode * float64(s.NumNodeIDs()))
		e.step(s)
	}
	if s.NumNodeIDs() != 2 {
		t.Fatalf("NumNodeIDs = %d under load again, want 2", s.NumNodeIDs())
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if n := len(e.storeLeases()); n != 0 {
		t.Fatalf("%d leases left after Close", n)
	}
}

// An extra session that loses its lease is dropped; the session and its issuing go
// on, OnFatal is not called.
func TestDemandExtraLeaseLost(t *testing.T) {
	e := newEnv(t, idkeeper.Config{FirstLease: time.Minute, LeaseDuration: 4 * time.Minute})
	l := newLoad(e)
	s := e.openOnDemand(1, 2, l, nil)
	l.set(0.95 * perNode)
	for range 8 {
		e.step(s)
	}
	if s.NumNodeIDs() != 2 {
		t.Fatalf("NumNodeIDs = %d, want 2", s.NumNodeIDs())
	}
	// 35 % of two node IDs: neither hot nor idle, with one node ID or two.
	l.set(0.35 * 2 * perNode)
	var extra idkeeper.Requester
	for _, ls := range e.storeLeases() {
		if ls.Requester != s.Requester() {
			extra = ls.Requester
		}
	}
	if _, err := e.reg.Remove(context.Background(), idkeeper.RemoveRequest{Requester: extra, KeyID: testKeyID}); err != nil {
		t.Fatal(err)
	}
	// The extra session's next Renew (at half its lease) finds it gone.
	for range 150 {
		e.step(s)
	}
	e.waitFor("the extra session dropped", func() bool { return s.NumNodeIDs() == 1 })
	if !strings.Contains(e.logs.String(), "an extra session lost its lease") {
		t.Fatalf("drop not logged:\n%s", e.logs)
	}
	e.expectNoFatal()
	if err := s.Err(); err != nil {
		t.Fatalf("the session ended: %v", err)
	}
	ids := make([]int64, 100)
	if err := s.NextIDs(ids); err != nil {
		t.Fatal(err)
	}
	if err := s.Check(); err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.Demand.Shrinks != 1 || st.Demand.NodeIDs != 1 {
		t.Fatalf("Stats: %+v", st.Demand)
	}
	if reqs := e.requesters(); len(reqs) != 1 || reqs[s.Requester().Key()] != 1 {
		t.Fatalf("registry leases: %v", reqs)
	}
}

// The session's own lease lost: OnFatal as without on-demand node IDs, and the
// extra sessions are given back.
func TestDemandBaseLeaseLost(t *testing.T) {
	e := newEnv(t, idkeeper.Config{FirstLease: time.Minute, LeaseDuration: 4 * time.Minute})
	l := newLoad(e)
	s := e.openOnDemand(1, 2, l, nil)
	l.set(0.95 * perNode)
	for range 8 {
		e.step(s)
	}
	if s.NumNodeIDs() != 2 {
		t.Fatalf("NumNodeIDs = %d, want 2", s.NumNodeIDs())
	}
	l.set(0.35 * 2 * perNode)
	e.removeBehindBack(s)
	for range 150 {
		e.step(s)
	}
	if err := e.expectFatal(); !errors.Is(err, client.ErrLeaseLost) {
		t.Fatalf("OnFatal: %v", err)
	}
	e.waitFor("the extra session released", func() bool { return len(e.storeLeases()) == 0 })
	if _, err := s.NextID(); !errors.Is(err, client.ErrLeaseLost) {
		t.Fatalf("NextID after the loss: %v", err)
	}
}

func TestDemandConfig(t *testing.T) {
	for _, c := range []struct{ count, max int }{{2, 1}, {1, protocol.MaxCount + 1}, {1, -1}} {
		_, err := client.New(client.Config{ServerURL: "http://x", APIKey: "k", Count: c.count, MaxCount: c.max})
		if err == nil || !strings.Contains(err.Error(), "MaxCount") {
			t.Errorf("Count %d, MaxCount %d: %v", c.count, c.max, err)
		}
	}
	for _, c := range []struct{ count, max int }{{1, 0}, {2, 2}, {1, protocol.MaxCount}} {
		s, err := client.New(client.Config{ServerURL: "http://x", APIKey: "k", Count: c.count, MaxCount: c.max})
		if err != nil {
			t.Errorf("Count %d, MaxCount %d: %v", c.count, c.max, err)
			continue
		}
		if s.NumNodeIDs() != c.count {
			t.Errorf("NumNodeIDs = %d, want %d", s.NumNodeIDs(), c.count)
		}
	}
}

// A call headed for an extra session that no longer issues (closed while the call
// picked it) is served by the session's own node IDs: never an error for that.
func TestDemandFallsBackFromAClosedExtra(t *testing.T) {
	e := newEnv(t, idkeeper.Config{})
	l := newLoad(e)
	s := e.openOnDemand(1, 2, l, nil)
	l.set(0.95 * perNode)
	for range 6 {
		e.step(s)
	}
	extras := client.Extras(s)
	if s.NumNodeIDs() != 2 || len(extras) != 1 {
		t.Fatalf("NumNodeIDs = %d, %d extras", s.NumNodeIDs(), len(extras))
	}
	own := s.Leases()[0].NodeID
	if err := extras[0].Close(); err != nil { // still in the pool: as a call racing a shrink sees it
		t.Fatal(err)
	}
	layout := s.Layout()
	for i := range 2 {
		dst := make([]int64, 10)
		if err := s.NextIDsOn(i, dst); err != nil {
			t.Fatalf("NextIDsOn(%d): %v", i, err)
		}
		if p, _ := layout.Decode(dst[0]); p.Node != own {
			t.Fatalf("minted on node ID %d after its session closed", p.Node)
		}
		if _, err := s.NextID(); err != nil {
			t.Fatalf("NextID: %v", err)
		}
	}
	for range 2 { // round robin: one of the two goes to the closed extra
		batch := make([]int64, 400)
		if err := s.NextIDs(batch); err != nil {
			t.Fatalf("NextIDs: %v", err)
		}
		if p, _ := layout.Decode(batch[0]); p.Node != own || !slices.IsSorted(batch) {
			t.Fatalf("batch on node ID %d, sorted %v", p.Node, slices.IsSorted(batch))
		}
	}
}
