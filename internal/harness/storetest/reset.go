package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/protocol"
)

// reset calls Reset and adopts the generation it returns.
func (e *env) reset(p idkeeper.ResetParams) idkeeper.ResetResult {
	e.t.Helper()
	res, err := e.s.Reset(e.ctx, p)
	e.must(err, "Reset")
	if res.Generation.ID == "" || res.Generation.Origin != idkeeper.OriginRecovered || !res.Generation.At.Equal(e.now()) {
		e.t.Fatalf("Reset returned generation %+v, want an ID, origin recovered, At now (%s)", res.Generation, fmtTime(e.now()))
	}
	if st := e.status(); st.Generation != res.Generation || st.Fence < p.MinFence {
		e.t.Fatalf("Status after Reset = %+v, want generation %+v and fence ≥ %d", st, res.Generation, p.MinFence)
	}
	e.gen = res.Generation
	e.fence = max(e.fence, p.MinFence)
	e.nodes = max(e.nodes, p.Pool.Nodes)
	return res
}

// wantRaised checks every node after a Reset to until: quarantined and floored at
// least until, restorable, its own watermark and lease unchanged.
func (e *env) wantRaised(snap []idkeeper.NodeState, until time.Time) {
	e.t.Helper()
	for i := range e.nodes {
		id := e.first + idkeeper.NodeID(i)
		st := e.node(id)
		var b idkeeper.NodeState
		if i < len(snap) {
			b = snap[i]
		}
		wantTime(e.t, "QuarantinedUntil after Reset", st.QuarantinedUntil, maxTime(b.QuarantinedUntil, until))
		wantTime(e.t, "Floor after Reset", st.Floor, maxTime(b.Floor, until))
		wantTime(e.t, "own watermark after Reset", st.Watermark, b.Watermark)
		if !st.Restorable || st.LastToken != b.LastToken {
			e.t.Fatalf("node %d after Reset: Restorable %v, LastToken %d; want true, %d", id, st.Restorable, st.LastToken, b.LastToken)
		}
		if (st.Lease == nil) != (b.Lease == nil) {
			e.t.Fatalf("node %d: Reset changed whether it is held", id)
		}
	}
	e.check()
}

func testResetRecovers(t *testing.T, open Factory) {
	e := setup(t, open, 4)
	e.allocOne(req(1), 10*time.Minute)
	e.renew(req(1), 48*time.Hour)
	e.alloc(req(2), 1, 10*time.Minute)
	now := e.advance(20 * time.Minute)
	leases := e.leases()
	snap := e.snapshot()
	old := e.gen
	stale := e.guard()
	until := now.Add(time.Hour)
	minFence := e.fence + 100
	res := e.reset(idkeeper.ResetParams{Seen: old, Pool: poolOf(4), Until: until, MinFence: minFence})
	if !res.NewGeneration || res.Generation.ID == old.ID || res.Generation.Number != old.Number+1 {
		t.Fatalf("Reset(seen the stored generation) = %+v, want a new generation numbered %d", res, old.Number+1)
	}
	e.wantRaised(snap, until)
	wantSameLeases(t, "leases after Reset", e.leases(), leases)
	e.wantCounts(idkeeper.Counts{Total: 4, Leased: 1, InGrace: 1, Quarantined: 2})
	if _, err := e.s.Alloc(e.ctx, stale, idkeeper.AllocParams{Requester: req(3), KeyID: keyA, Count: 1, First: time.Minute}); !errors.Is(err, idkeeper.ErrGenerationChanged) {
		t.Fatalf("Alloc under the old generation: %v, want ErrGenerationChanged", err)
	}
	if r, err := e.s.Init(e.ctx, poolOf(4)); err != nil || r.Fresh || r.Generation != e.gen {
		t.Fatalf("Init after Reset = %+v, %v; want the recovered generation", r, err)
	}

	e.wantExhausted(req(3), 1, 0)
	e.renew(req(1), 48*time.Hour)
	e.remove(req(2), time.Time{})
	e.wantCounts(idkeeper.Counts{Total: 4, Leased: 1, Quarantined: 3})
	e.clock.Set(until)
	g := e.alloc(req(3), 3, 10*time.Minute) // checks tokens start at MinFence+1, NotBefore after the floor
	for _, l := range g.Leases {
		wantTime(t, "NotBefore after Reset", l.NotBefore, until.Add(ms))
	}
	if _, err := e.s.Reset(e.ctx, idkeeper.ResetParams{Seen: e.gen, Pool: poolOf(4), Until: until, MinFence: idkeeper.MaxFencingToken + 1}); protocol.ErrorCode(err) != protocol.CodeInvalidRequest {
		t.Fatalf("Reset with MinFence above 2^53-1: %v, want INVALID_REQUEST", err)
	}
	if st := e.status(); st.Generation != e.gen || st.Fence != e.fence {
		t.Fatalf("a refused Reset changed the store: %+v", st)
	}
}

// testResetOtherReplica: a replica that had seen an older generation finds another
// one: it raises everything again (whatever the origin) but keeps that generation,
// so the replicas that adopted it see no change and nothing ping-pongs.
func testResetOtherReplica(t *testing.T, open Factory) {
	e := setup(t, open, 2)
	t0 := e.now()
	e.alloc(req(1), 1, 10*time.Minute)
	old := e.gen
	first := e.reset(idkeeper.ResetParams{Seen: old, Pool: poolOf(2), Until: t0.Add(time.Hour)})
	if !first.NewGeneration {
		t.Fatalf("first Reset kept the generation")
	}
	e.advance(time.Minute)
	for _, minFence := range []uint64{0, e.fence + 500} {
		snap := e.snapshot()
		until := e.now().Add(5 * time.Hour)
		got := e.reset(idkeeper.ResetParams{Seen: old, Pool: poolOf(2), Until: until, MinFence: minFence})
		if got.NewGeneration || got.Generation.ID != first.Generation.ID || got.Generation.Number != first.Generation.Number {
			t.Fatalf("Reset with a stale generation = %+v, want generation %+v kept", got, first.Generation)
		}
		e.wantRaised(snap, until)
	}
	e.clock.Set(t0.Add(5*time.Hour + time.Minute))
	e.alloc(req(2), 1, 10*time.Minute) // checks the token is above the raised fence
}

func testResetGrows(t *testing.T, open Factory) {
	e := setup(t, open, 2)
	until := e.now().Add(time.Hour)
	snap := e.snapshot()
	e.reset(idkeeper.ResetParams{Seen: e.gen, Pool: poolOf(4), Until: until})
	e.wantCounts(idkeeper.Counts{Total: 4, Quarantined: 4})
	e.wantRaised(snap, until)
	_, err := e.s.Init(e.ctx, poolOf(3))
	wantCode(t, err, protocol.CodeInvalidRequest)
}

func testResetAfterWipe(t *testing.T, open Factory) {
	e := setup(t, open, 4)
	w, ok := e.s.(Wiper)
	if !ok {
		t.Skip("the store does not implement storetest.Wiper")
	}
	e.alloc(req(1), 2, 10*time.Minute)
	e.must(w.WipeForTest(e.ctx), "WipeForTest")
	e.wantNothingWritten("a wiped store")

	old := e.gen
	until := e.now().Add(time.Hour)
	res := e.reset(idkeeper.ResetParams{Seen: old, Pool: poolOf(4), Until: until, MinFence: e.fence})
	if !res.NewGeneration || res.Generation.ID == old.ID || res.Generation.Number != old.Number+1 {
		t.Fatalf("Reset of a wiped store = %+v, want a new generation numbered %d", res, old.Number+1)
	}
	e.wantRaised(nil, until)
	e.wantCounts(idkeeper.Counts{Total: 4, Quarantined: 4})
	if g := e.renew(req(1), time.Hour); len(g.Leases) != 0 {
		t.Fatalf("Renew after the wipe = %v, want empty", nodeIDs(g.Leases))
	}
	e.wantExhausted(req(2), 1, 0)
	e.clock.Set(until)
	// alloc checks the tokens continue above MinFence and NotBefore clears Until.
	e.alloc(req(2), 2, 10*time.Minute)
}

// testResetFloor: a reset raises the floor, not the store's own watermark; a new
// grant starts after the higher of the two; a later, lower Reset never lowers either.
func testResetFloor(t *testing.T, open Factory) {
	e := setup(t, open, 2)
	a := e.allocOne(req(1), 10*time.Minute)
	e.remove(req(1), e.now().Add(-time.Minute)) // own watermark just before the window
	own := e.node(a).Watermark
	until := e.now().Add(30 * time.Minute)
	snap := e.snapshot()
	e.reset(idkeeper.ResetParams{Seen: e.gen, Pool: poolOf(2), Until: until})
	e.wantRaised(snap, until)
	snap = e.snapshot()
	e.reset(idkeeper.ResetParams{Seen: e.gen, Pool: poolOf(2), Until: until.Add(-20 * time.Minute)})
	e.wantRaised(snap, until)
	wantTime(t, "own watermark", e.node(a).Watermark, own)
	e.clock.Set(until)
	g := e.alloc(req(2), 2, 10*time.Minute)
	for _, l := range g.Leases {
		wantTime(t, "NotBefore after the floor", l.NotBefore, until.Add(ms))
	}
}

// testResetAfterInitAnew: a store wiped and initialised anew (someone ran init)
// holds a fresh generation that a replica has not seen: the replica's Reset recovers
// it all the same, keeping its ID, with origin recovered.
func testResetAfterInitAnew(t *testing.T, open Factory) {
	e := setup(t, open, 3)
	w, ok := e.s.(Wiper)
	if !ok {
		t.Skip("the store does not implement storetest.Wiper")
	}
	e.alloc(req(1), 2, 10*time.Minute)
	old := e.gen
	e.must(w.WipeForTest(e.ctx), "WipeForTest")
	anew, err := e.s.Init(e.ctx, poolOf(3))
	e.must(err, "Init after the wipe")
	if !anew.Fresh || anew.Generation.ID == old.ID || anew.Generation.Number != 1 {
		t.Fatalf("Init of a wiped store = %+v, want a fresh generation 1 with a new ID", anew)
	}
	until := e.now().Add(time.Hour)
	res := e.reset(idkeeper.ResetParams{Seen: old, Pool: poolOf(3), Until: until, MinFence: e.fence})
	if res.NewGeneration || res.Generation.ID != anew.Generation.ID || res.Generation.Number != 1 {
		t.Fatalf("Reset of a store initialised anew = %+v, want its generation kept", res)
	}
	e.wantRaised(nil, until)
	e.wantExhausted(req(2), 1, 0)
}
