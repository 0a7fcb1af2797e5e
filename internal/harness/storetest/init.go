package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/protocol"
)

func testNow(t *testing.T, open Factory) {
	e := openEnv(t, open)
	for _, d := range []time.Duration{0, 1234567 * time.Microsecond, 48 * time.Hour} {
		e.clock.Advance(d)
		got, err := e.s.Now(e.ctx)
		e.must(err, "Now")
		wantTime(t, "Now", got, e.clock.Now().Truncate(ms))
		if got.Location() != time.UTC {
			t.Fatalf("Now() location %v, want UTC", got.Location())
		}
	}
}

func testPing(t *testing.T, open Factory) {
	e := openEnv(t, open)
	e.must(e.s.Ping(e.ctx), "Ping")
}

// testNotInitialised: an empty store reports no generation, has no pool, and every
// guarded method fails with ErrStoreReset and writes nothing, whatever the guard.
func testNotInitialised(t *testing.T, open Factory) {
	e := openEnv(t, open)
	st := e.status()
	if st.Initialised || !st.Generation.IsZero() || st.Pool.Nodes != 0 || st.Fence != 0 {
		t.Fatalf("Status of an empty store = %+v, want not initialised, no pool", st)
	}
	e.wantNothingWritten("an empty store")
	if _, err := e.s.Node(e.ctx, 0); !errors.Is(err, idkeeper.ErrNotFound) {
		t.Fatalf("Node(0) of an empty store: %v, want ErrNotFound", err)
	}
	if c := e.counts(); c != (idkeeper.Counts{}) {
		t.Fatalf("Counts of an empty store = %+v", c)
	}
}

// wantNothingWritten checks that every guarded method fails with ErrStoreReset on
// a store without a generation, with the env's guard and with an empty one, and
// that the store stays empty.
func (e *env) wantNothingWritten(what string) {
	e.t.Helper()
	for _, g := range []idkeeper.Guard{e.guard(), {}} {
		reset := func(op string, err error) {
			e.t.Helper()
			if !errors.Is(err, idkeeper.ErrStoreReset) || !errors.Is(err, idkeeper.ErrGenerationChanged) {
				e.t.Fatalf("%s on %s (guard %+v): err = %v, want ErrStoreReset (ErrGenerationChanged)", op, what, g, err)
			}
		}
		_, err := e.s.Alloc(e.ctx, g, idkeeper.AllocParams{Requester: req(1), KeyID: keyA, Count: 1, First: time.Minute})
		reset("Alloc", err)
		_, err = e.s.Renew(e.ctx, g, idkeeper.RenewParams{Requester: req(1), KeyID: keyA, Duration: time.Hour,
			Claims: []idkeeper.Claim{{NodeID: 0, Token: 1, ExpiresAt: e.now().Add(time.Hour)}}})
		reset("Renew", err)
		_, err = e.s.Remove(e.ctx, g, idkeeper.RemoveParams{Requester: req(1), KeyID: keyA, MintedUpTo: e.now()})
		reset("Remove", err)
		_, err = e.s.Reclaim(e.ctx, g, 0)
		reset("Reclaim", err)
		reset("Quarantine", e.s.Quarantine(e.ctx, g, e.now().Add(time.Hour), 0))
		reset("Grow", e.s.Grow(e.ctx, g, poolOf(4)))
	}
	if st := e.status(); st.Initialised || st.Pool.Nodes != 0 {
		e.t.Fatalf("%s after refused calls: %+v, want still empty", what, st)
	}
	if ls := e.leases(); len(ls) != 0 {
		e.t.Fatalf("%s: refused calls wrote leases %v", what, nodeIDs(ls))
	}
	if hs, err := e.s.KeyHoldings(e.ctx); err != nil || len(hs) != 0 {
		e.t.Fatalf("%s: KeyHoldings = %v, %v; want none", what, hs, err)
	}
}

func testInitFresh(t *testing.T, open Factory) {
	e := setup(t, open, 8)
	want := idkeeper.Generation{ID: e.gen.ID, Number: 1, Origin: idkeeper.OriginFresh, At: e.now()}
	if e.gen != want {
		t.Fatalf("Init generation = %+v, want %+v", e.gen, want)
	}
	if st := e.status(); !st.Initialised || st.Generation != want || st.Pool.Nodes != 8 || st.Fence != 0 {
		t.Fatalf("Status after Init = %+v, want initialised, generation %+v, 8 nodes, fence 0", st, want)
	}
	e.wantCounts(idkeeper.Counts{Total: 8, Remaining: 8})
	for id := range 8 {
		st := e.node(idkeeper.NodeID(id))
		if st.Lease != nil || !st.Watermark.IsZero() || !st.QuarantinedUntil.IsZero() || !st.Floor.IsZero() ||
			st.LastToken != 0 || st.Restorable {
			t.Fatalf("fresh node %d = %+v, want free, watermark zero, never quarantined", id, st)
		}
	}
	for _, id := range []idkeeper.NodeID{-1, 8, 4096} {
		if _, err := e.s.Node(e.ctx, id); !errors.Is(err, idkeeper.ErrNotFound) {
			t.Fatalf("Node(%d) = %v, want ErrNotFound", id, err)
		}
	}
	if ls := e.leases(); len(ls) != 0 {
		t.Fatalf("fresh store has leases %v", nodeIDs(ls))
	}
	e.check()
	// The pool is usable at once: every node ready, so the holder may mint now.
	g := e.alloc(req(1), 8, 10*time.Minute)
	for _, l := range g.Leases {
		if l.NotBefore.After(e.now()) {
			t.Fatalf("fresh node %d: NotBefore %s is in the future", l.NodeID, fmtTime(l.NotBefore))
		}
	}
	if _, err := e.s.Init(e.ctx, poolOf(0)); protocol.ErrorCode(err) != protocol.CodeInvalidRequest {
		t.Fatalf("Init(0) = %v, want INVALID_REQUEST", err)
	}
}

func testInitRandomGeneration(t *testing.T, open Factory) {
	a := setup(t, open, 4)
	b := setup(t, open, 4)
	if a.gen.ID == b.gen.ID {
		t.Fatalf("two fresh stores got the same generation ID %q", a.gen.ID)
	}
}

// testInitAgain: Init on an initialised store changes nothing and reports its
// generation, so running `idkeeper init` twice is harmless.
func testInitAgain(t *testing.T, open Factory) {
	e := setup(t, open, 4)
	e.alloc(req(1), 2, 10*time.Minute)
	before := e.leases()
	e.advance(time.Hour)
	res, err := e.s.Init(e.ctx, poolOf(4))
	e.must(err, "Init again")
	if res.Fresh || res.Generation != e.gen {
		t.Fatalf("Init on an initialised store = %+v, want not Fresh and generation %+v", res, e.gen)
	}
	wantSameLeases(t, "leases after Init again", e.leases(), before)
	e.check()
	e.renew(req(1), time.Hour)
	e.alloc(req(2), 2, 10*time.Minute)
}

func testInitGrow(t *testing.T, open Factory) {
	e := setup(t, open, 4)
	e.alloc(req(1), 4, 10*time.Minute)
	before := e.leases()
	res, err := e.s.Init(e.ctx, poolOf(7))
	e.must(err, "Init(7)")
	if res.Fresh || res.Generation != e.gen {
		t.Fatalf("Init growing the pool = %+v, want not Fresh and generation %+v", res, e.gen)
	}
	e.nodes = 7
	e.wantGrown(4, 7, before)
}

// wantGrown checks a pool grown from n to m with the first n node IDs held.
func (e *env) wantGrown(n, m int, before []idkeeper.Lease) {
	e.t.Helper()
	e.wantCounts(idkeeper.Counts{Total: m, Remaining: m - n, Leased: n})
	for id := n; id < m; id++ {
		st := e.node(idkeeper.NodeID(id))
		if st.Lease != nil || !st.Watermark.IsZero() || !st.QuarantinedUntil.IsZero() {
			e.t.Fatalf("added node %d = %+v, want free, watermark zero, never quarantined", id, st)
		}
	}
	wantSameLeases(e.t, "leases after growing", e.leases(), before)
	g := e.alloc(req(2), m-n, 10*time.Minute)
	for i, l := range g.Leases {
		if l.NodeID != idkeeper.NodeID(n+i) {
			e.t.Fatalf("after growing %d → %d with 0..%d held, Alloc(%d) = %v", n, m, n-1, m-n, nodeIDs(g.Leases))
		}
	}
}

func testInitShrinkRefused(t *testing.T, open Factory) {
	e := setup(t, open, 4)
	e.alloc(req(1), 1, 10*time.Minute)
	_, err := e.s.Init(e.ctx, poolOf(3))
	wantCode(t, err, protocol.CodeInvalidRequest)
	wantCode(t, e.s.Grow(e.ctx, e.guard(), poolOf(3)), protocol.CodeInvalidRequest)
	e.check()
	e.node(3)
	res, err := e.s.Init(e.ctx, poolOf(4))
	e.must(err, "Init(4) after a refused shrink")
	if res.Fresh || res.Generation != e.gen {
		t.Fatalf("Init(4) = %+v, want the old generation %+v", res, e.gen)
	}
}

// testGrowGuarded: Grow adds node IDs like Init, but only under the adopted
// generation: a registry never (re)initialises a store that lost its generation.
func testGrowGuarded(t *testing.T, open Factory) {
	e := setup(t, open, 4)
	e.alloc(req(1), 4, 10*time.Minute)
	before := e.leases()
	g := e.guard()
	g.Generation = "another"
	err := e.s.Grow(e.ctx, g, poolOf(6))
	if !errors.Is(err, idkeeper.ErrStoreReset) {
		t.Fatalf("Grow with another generation: %v, want ErrStoreReset", err)
	}
	if st := e.status(); st.Pool.Nodes != 4 {
		t.Fatalf("a refused Grow changed the pool to %d", st.Pool.Nodes)
	}
	e.must(e.s.Grow(e.ctx, e.guard(), poolOf(4)), "Grow to the same size")
	e.must(e.s.Grow(e.ctx, e.guard(), poolOf(6)), "Grow(6)")
	e.nodes = 6
	e.wantGrown(4, 6, before)
}
