package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper"
)

// reset calls Reset with the env's adopted sentinel and tracks what it adopts.
func (e *env) reset(old string, p idkeeper.ResetParams) (string, bool) {
	e.t.Helper()
	s, recovered, err := e.s.Reset(e.ctx, old, p)
	e.must(err, "Reset")
	if s == "" {
		e.t.Fatalf("Reset adopted an empty sentinel")
	}
	e.sentinel = s
	e.fence = max(e.fence, p.MinFence)
	e.nodes = max(e.nodes, p.Nodes)
	return s, recovered
}

func (e *env) wantInitAdopts(sentinel string) {
	e.t.Helper()
	res, err := e.s.Init(e.ctx, e.nodes)
	e.must(err, "Init")
	if res.Fresh || res.Sentinel != sentinel {
		e.t.Fatalf("Init = %+v, want not Fresh, sentinel %q", res, sentinel)
	}
}

func testResetRecovers(t *testing.T, open Factory) {
	e := setup(t, open, 4)
	t0 := e.now()
	a := e.allocOne(req(1), 10*time.Minute)
	e.renew(req(1), 48*time.Hour)
	e.alloc(req(2), 1, 10*time.Minute)
	now := e.advance(20 * time.Minute)
	leases := e.leases()
	old := e.sentinel
	until := now.Add(time.Hour)
	minFence := e.fence + 100
	s, recovered := e.reset(old, idkeeper.ResetParams{Nodes: 4, Until: until, MinFence: minFence})
	if !recovered || s == old {
		t.Fatalf("Reset(old) = %q, recovered %v; want a new sentinel, recovered", s, recovered)
	}
	for id := range 4 {
		st := e.node(idkeeper.NodeID(id))
		wantTime(t, "QuarantinedUntil after Reset", st.QuarantinedUntil, until)
		wantWM := until
		if idkeeper.NodeID(id) == a {
			wantWM = t0.Add(48 * time.Hour) // raised, never lowered
		}
		wantTime(t, "watermark after Reset", st.Watermark, wantWM)
	}
	wantSameLeases(t, "leases after Reset", e.leases(), leases)
	e.wantCounts(idkeeper.Counts{Total: 4, Leased: 1, InGrace: 1, Quarantined: 2})
	e.check()
	e.wantInitAdopts(s)

	// This Store value adopted the new sentinel: mutating methods work.
	e.wantExhausted(req(3), 1, 0)
	e.renew(req(1), 48*time.Hour)
	e.remove(req(2), time.Time{})
	e.wantCounts(idkeeper.Counts{Total: 4, Leased: 1, Quarantined: 3})
	e.clock.Set(until)
	g := e.alloc(req(3), 3, 10*time.Minute) // checks tokens start at MinFence+1
	for _, l := range g.Leases {
		wantTime(t, "NotBefore after Reset", l.NotBefore, until.Add(ms))
	}
}

func testResetOtherReplica(t *testing.T, open Factory) {
	e := setup(t, open, 2)
	t0 := e.now()
	e.alloc(req(1), 1, 10*time.Minute)
	old := e.sentinel
	s, recovered := e.reset(old, idkeeper.ResetParams{Nodes: 2, Until: t0.Add(time.Hour)})
	if !recovered {
		t.Fatalf("first Reset did not recover")
	}
	snap := e.snapshot()

	// Another replica still holding the old sentinel finds the store recovered:
	// only the fence may rise.
	for _, minFence := range []uint64{0, e.fence + 500} {
		got, recovered := e.reset(old, idkeeper.ResetParams{Nodes: 2, Until: t0.Add(5 * time.Hour), MinFence: minFence})
		if recovered || got != s {
			t.Fatalf("Reset with a stale sentinel = %q, recovered %v; want %q, not recovered", got, recovered, s)
		}
		e.wantUnchanged("Reset with a stale sentinel", snap)
	}
	e.wantInitAdopts(s)
	e.clock.Set(t0.Add(time.Hour))
	e.alloc(req(2), 1, 10*time.Minute) // checks the token is MinFence+1
}

func testResetGrows(t *testing.T, open Factory) {
	e := setup(t, open, 2)
	until := e.now().Add(time.Hour)
	if _, recovered := e.reset(e.sentinel, idkeeper.ResetParams{Nodes: 4, Until: until}); !recovered {
		t.Fatalf("Reset did not recover")
	}
	e.wantCounts(idkeeper.Counts{Total: 4, Quarantined: 4})
	for id := range 4 {
		st := e.node(idkeeper.NodeID(id))
		wantTime(t, "QuarantinedUntil", st.QuarantinedUntil, until)
		wantTime(t, "watermark", st.Watermark, until)
	}
	e.check()
	_, err := e.s.Init(e.ctx, 3)
	wantCode(t, err, idkeeper.CodeInvalidRequest)
}

func testResetAfterWipe(t *testing.T, open Factory) {
	e := setup(t, open, 4)
	w, ok := e.s.(Wiper)
	if !ok {
		t.Skip("the store does not implement storetest.Wiper")
	}
	e.alloc(req(1), 2, 10*time.Minute)
	e.must(w.WipeForTest(e.ctx), "WipeForTest")

	nothingWritten := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, idkeeper.ErrStoreReset) {
			t.Fatalf("%s on a wiped store: err = %v, want ErrStoreReset", what, err)
		}
		if ls := e.leases(); len(ls) != 0 {
			t.Fatalf("%s on a wiped store wrote leases %v", what, nodeIDs(ls))
		}
		if _, err := e.s.Node(e.ctx, 0); !errors.Is(err, idkeeper.ErrNotFound) {
			t.Fatalf("%s on a wiped store: Node(0) err = %v, want ErrNotFound (no pool)", what, err)
		}
	}
	_, err := e.s.Alloc(e.ctx, req(2), 1, 10*time.Minute)
	nothingWritten("Alloc", err)
	_, err = e.s.Renew(e.ctx, req(1), time.Hour)
	nothingWritten("Renew", err)
	_, err = e.s.Remove(e.ctx, req(1), e.now())
	nothingWritten("Remove", err)
	_, err = e.s.Reclaim(e.ctx, 0)
	nothingWritten("Reclaim", err)
	nothingWritten("Quarantine", e.s.Quarantine(e.ctx, e.now().Add(time.Hour), 0))

	old := e.sentinel
	until := e.now().Add(time.Hour)
	s, recovered := e.reset(old, idkeeper.ResetParams{Nodes: 4, Until: until, MinFence: e.fence})
	if !recovered || s == old {
		t.Fatalf("Reset of a wiped store = %q, recovered %v; want a new sentinel, recovered", s, recovered)
	}
	for id := range 4 {
		st := e.node(idkeeper.NodeID(id))
		if st.Lease != nil {
			t.Fatalf("node %d held after a wipe", id)
		}
		wantTime(t, "QuarantinedUntil", st.QuarantinedUntil, until)
		wantTime(t, "watermark", st.Watermark, until)
	}
	e.wantCounts(idkeeper.Counts{Total: 4, Quarantined: 4})
	e.check()
	e.wantInitAdopts(s)
	if g := e.renew(req(1), time.Hour); len(g.Leases) != 0 {
		t.Fatalf("Renew after the wipe = %v, want empty", nodeIDs(g.Leases))
	}
	e.wantExhausted(req(2), 1, 0)
	e.clock.Set(until)
	// alloc checks the tokens continue above MinFence and NotBefore clears Until.
	e.alloc(req(2), 2, 10*time.Minute)
}
