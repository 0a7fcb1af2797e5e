package controls_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/bolt"
	"github.com/idkeeper/idkeeper/internal/harness/chaos/controls"
	"github.com/idkeeper/idkeeper/internal/harness/fakeclock"
)

var t0 = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

func who(i int) idkeeper.Requester {
	return idkeeper.Requester{MachineID: "host", PID: i, StartedAt: t0}
}

// open returns a bolt store on clk with a pool of nodes, its guard and generation.
func open(t *testing.T, clk *fakeclock.Clock, nodes int) (*bolt.Store, idkeeper.Guard, idkeeper.Generation) {
	t.Helper()
	s, err := bolt.Open(filepath.Join(t.TempDir(), "s.db"), bolt.Options{Clock: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	res, err := s.Init(t.Context(), idkeeper.PoolSpec{Nodes: nodes})
	if err != nil {
		t.Fatal(err)
	}
	return s, idkeeper.Guard{Generation: res.Generation.ID}, res.Generation
}

// wrapped is open's store wrapped by the control name.
func wrapped(t *testing.T, clk *fakeclock.Clock, nodes int, name string) (idkeeper.Store, idkeeper.Guard, idkeeper.Generation) {
	t.Helper()
	bare, g, gen := open(t, clk, nodes)
	s, err := controls.Wrap(bare, name)
	if err != nil {
		t.Fatal(err)
	}
	return s, g, gen
}

func alloc(t *testing.T, s idkeeper.Store, g idkeeper.Guard, r idkeeper.Requester, first time.Duration) {
	t.Helper()
	if _, err := s.Alloc(t.Context(), g, idkeeper.AllocParams{Requester: r, KeyID: "k", Count: 1, First: first}); err != nil {
		t.Fatal(err)
	}
}

func reclaim(t *testing.T, s idkeeper.Store, g idkeeper.Guard, want int) {
	t.Helper()
	if n, err := s.Reclaim(t.Context(), g, 0); err != nil || n != want {
		t.Fatalf("Reclaim = %d, %v; want %d", n, err, want)
	}
}

func holder(t *testing.T, s idkeeper.Store) string {
	t.Helper()
	st, err := s.Node(t.Context(), 0)
	if err != nil {
		t.Fatal(err)
	}
	if st.Lease == nil {
		return ""
	}
	return st.Lease.Requester.Key()
}

// The stale reclaim frees what the previous run read as expired, whoever holds
// it now: a lease renewed since, and one granted anew since.
func TestStaleReclaim(t *testing.T) {
	clk := fakeclock.New(t0)
	s, g, _ := wrapped(t, clk, 1, controls.StaleReclaim)
	a, b, c := who(1), who(2), who(3)

	alloc(t, s, g, a, time.Minute)
	clk.Advance(2 * time.Minute)
	reclaim(t, s, g, 0) // reads a's lease as expired, frees nothing yet
	if _, err := s.Renew(t.Context(), g, idkeeper.RenewParams{Requester: a, KeyID: "k", Duration: 10 * time.Minute}); err != nil {
		t.Fatal(err)
	}
	reclaim(t, s, g, 1)
	if h := holder(t, s); h != "" {
		t.Fatalf("a lease renewed after the read is held by %q; want it freed", h)
	}

	alloc(t, s, g, b, time.Minute)
	clk.Advance(2 * time.Minute)
	reclaim(t, s, g, 0)
	reclaim(t, s, g, 1) // frees b; its read saw b expired again
	alloc(t, s, g, c, 10*time.Minute)
	reclaim(t, s, g, 1)
	if h := holder(t, s); h != "" {
		t.Fatalf("a node granted anew after the read is held by %q; want it freed", h)
	}
	st, err := s.Node(t.Context(), 0)
	if err != nil || !st.Watermark.Equal(clk.Now().Add(10*time.Minute)) {
		t.Fatalf("node after the stale reclaim = %+v, %v; want the watermark kept", st, err)
	}
}

// Without its quarantine, a reset leaves the node IDs allocatable at once, their
// watermark floors at now.
func TestNoResetQuarantine(t *testing.T) {
	s, _, gen := wrapped(t, fakeclock.New(t0), 2, controls.NoResetQuarantine)
	if _, err := s.Reset(t.Context(), idkeeper.ResetParams{Seen: gen, Pool: idkeeper.PoolSpec{Nodes: 2}, Until: t0.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	for n := range idkeeper.NodeID(2) {
		st, err := s.Node(t.Context(), n)
		if err != nil || st.QuarantinedUntil.After(t0) || st.Floor.After(t0) {
			t.Fatalf("node %d after the reset = %+v, %v; want no quarantine and no floor past now", n, st, err)
		}
	}
}

// replicatedStore stands for a Redis store: a Store with replication IDs.
type replicatedStore struct{ idkeeper.Store }

func (replicatedStore) ReplicationID(context.Context) (string, error) { return "r1", nil }
func (replicatedStore) ReplicationChangeSafe(context.Context, string) (bool, string, error) {
	return false, "", nil
}

func TestWrap(t *testing.T) {
	type replicated interface {
		ReplicationID(ctx context.Context) (string, error)
	}
	clk := fakeclock.New(t0)
	bare, _, _ := open(t, clk, 1)
	for _, name := range []string{controls.NoResetQuarantine, controls.StaleReclaim} {
		w, err := controls.Wrap(replicatedStore{bare}, name)
		if _, ok := w.(replicated); err != nil || !ok {
			t.Errorf("Wrap(%s) of a replicated store: %T, %v; want the replication methods kept", name, w, err)
		}
		w, err = controls.Wrap(bare, name)
		if _, ok := w.(replicated); err != nil || ok {
			t.Errorf("Wrap(%s) of a bolt store: %T, %v; want no replication methods", name, w, err)
		}
	}
	if w, err := controls.Wrap(bare, ""); err != nil || w != idkeeper.Store(bare) {
		t.Errorf(`Wrap("") = %T, %v; want the store itself`, w, err)
	}
	if _, err := controls.Wrap(bare, "no-such-control"); err == nil {
		t.Error("Wrap of an unknown control: no error")
	}
}
