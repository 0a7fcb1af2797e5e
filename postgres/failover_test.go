package postgres_test

import (
	"errors"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/internal/harness/pgtest"
	"github.com/idkeeper/idkeeper/postgres"
)

// failoverGrants initialises a store on p, grants n node IDs one per requester
// and returns the guard of the generation, the highest token handed out and the
// grants by node.
func failoverGrants(t *testing.T, s *postgres.Store, n int) (idkeeper.Guard, map[idkeeper.NodeID]uint64) {
	t.Helper()
	ctx := t.Context()
	res, err := s.Init(ctx, idkeeper.PoolSpec{Nodes: 64})
	if err != nil {
		t.Fatal(err)
	}
	g := idkeeper.Guard{Generation: res.Generation.ID}
	grants := map[idkeeper.NodeID]uint64{}
	for i := range n {
		r := idkeeper.Requester{MachineID: "m", PID: 1 + i, StartedAt: time.Unix(1, 0)}
		gr, err := s.Alloc(ctx, g, idkeeper.AllocParams{Requester: r, KeyID: "k", Count: 1, First: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		l := gr.Leases[0]
		grants[l.NodeID] = l.FencingToken
		g.MinFence = max(g.MinFence, l.FencingToken)
	}
	return g, grants
}

// With a synchronous standby, the standby promoted after the primary is killed
// holds every acknowledged grant, and the guard of the old primary still holds:
// no reset is declared.
func TestFailover_SynchronousStandbyLosesNothing(t *testing.T) {
	p := pgtest.StartWith(t, pgtest.Options{Fsync: true})
	sb := p.StartStandby(t, "sb1")
	p.SetSynchronous(t, "sb1")
	s := open(t, p, postgres.Options{Schema: "failover"})
	d, err := s.CheckDurability(t.Context())
	if err != nil || !d.OnStandby() {
		t.Fatalf("durability %v, %v: want an acknowledged grant on the standby", d, err)
	}
	g, grants := failoverGrants(t, s, 20)
	p.Kill(t)
	sb.Promote(t)
	s2 := open(t, sb, postgres.Options{Schema: "failover"})
	leases, err := s2.Leases(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	held := map[idkeeper.NodeID]uint64{}
	for _, l := range leases {
		held[l.NodeID] = l.FencingToken
	}
	for n, tok := range grants {
		if held[n] != tok {
			t.Errorf("grant of node %d token %d lost in the failover", n, tok)
		}
	}
	r := idkeeper.Requester{MachineID: "m", PID: 999, StartedAt: time.Unix(1, 0)}
	if _, err := s2.Alloc(t.Context(), g, idkeeper.AllocParams{Requester: r, KeyID: "k", Count: 1, First: time.Hour}); err != nil {
		t.Fatalf("an Alloc under the old guard after the failover: %v (want no reset)", err)
	}
}

// With an asynchronous standby that did not receive the last grants, the
// promoted standby's fencing counter is below a token handed out: every guarded
// step fails with ErrStoreReset (ErrFenceRegression), so the lost grants are
// never served again, and Reset quarantines the pool.
func TestFailover_AsynchronousStandbyLossDetected(t *testing.T) {
	p := pgtest.StartWith(t, pgtest.Options{Fsync: true})
	sb := p.StartStandby(t, "sb1")
	s := open(t, p, postgres.Options{Schema: "failover"})
	g, _ := failoverGrants(t, s, 5)
	// The standby stops receiving: the grants that follow are on the primary only.
	sb.Kill(t)
	ctx := t.Context()
	for i := range 10 {
		r := idkeeper.Requester{MachineID: "late", PID: 1 + i, StartedAt: time.Unix(1, 0)}
		gr, err := s.Alloc(ctx, g, idkeeper.AllocParams{Requester: r, KeyID: "k", Count: 1, First: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		g.MinFence = max(g.MinFence, gr.Leases[0].FencingToken)
	}
	p.Kill(t)
	sb.Resume(t)
	sb.Promote(t)
	s2 := open(t, sb, postgres.Options{Schema: "failover"})
	r := idkeeper.Requester{MachineID: "new", PID: 1, StartedAt: time.Unix(1, 0)}
	_, err := s2.Alloc(ctx, g, idkeeper.AllocParams{Requester: r, KeyID: "k", Count: 1, First: time.Hour})
	if !errors.Is(err, idkeeper.ErrStoreReset) || !errors.Is(err, idkeeper.ErrFenceRegression) {
		t.Fatalf("Alloc on the promoted asynchronous standby: %v, want a fence regression (store reset)", err)
	}
	now, err := s2.Now(ctx)
	if err != nil {
		t.Fatal(err)
	}
	res, err := s2.Reset(ctx, idkeeper.ResetParams{Seen: idkeeper.Generation{ID: g.Generation}, Pool: idkeeper.PoolSpec{Nodes: 64},
		Until: now.Add(time.Hour), MinFence: g.MinFence})
	if err != nil {
		t.Fatal(err)
	}
	c, err := s2.Counts(ctx)
	if err != nil || c.Remaining != 0 || c.Quarantined != 64-c.Leased-c.InGrace {
		t.Fatalf("after the reset: %+v, %v (want every free node quarantined)", c, err)
	}
	g2 := idkeeper.Guard{Generation: res.Generation.ID, MinFence: g.MinFence}
	gr, err := s2.Alloc(ctx, g2, idkeeper.AllocParams{Requester: r, KeyID: "k", Count: 1, First: time.Hour})
	var de *idkeeper.Error
	if !errors.As(err, &de) {
		t.Fatalf("Alloc after the reset: %v %v, want NODE_IDS_EXHAUSTED while quarantined", gr, err)
	}
}
