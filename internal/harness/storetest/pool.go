package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/protocol"
)

// The pool spec (issue #22): a pool of node IDs First..First+Nodes−1 minted on a
// layout, both stored with the pool and never changed.

var poolCases = []testCase{
	{"Pool/Range", testPoolRange},
	{"Pool/OutsideRange", testPoolOutside},
	{"Pool/Mismatch", testPoolMismatch},
	{"Pool/GrowKeepsFirst", testPoolGrow},
	{"Pool/Layout", testPoolLayout},
	{"Pool/Invalid", testPoolInvalid},
	{"Pool/ResetWritesSpec", testPoolResetWritesSpec},
}

// layout41_10_12 is a layout other than the default: node IDs 0..1023.
var layout41_10_12 = idkeeper.Layout{Epoch: idkeeper.DefaultLayout.Epoch, TimestampBits: 41, NodeBits: 10, SequenceBits: 12}

// setupPool opens a store and initialises pool p.
func setupPool(t *testing.T, open Factory, p idkeeper.PoolSpec) *env {
	t.Helper()
	e := openEnv(t, open)
	res, err := e.s.Init(e.ctx, p)
	if err != nil {
		t.Fatalf("Init(%s): %v", p, err)
	}
	if !res.Fresh || res.Generation.ID == "" {
		t.Fatalf("Init(%s) on an empty store = %+v, want Fresh and a generation", p, res)
	}
	e.first, e.nodes, e.gen = p.First, p.Nodes, res.Generation
	e.wantPool(p)
	return e
}

// wantPool checks that Status reports pool p (its layout, zero meaning the default).
func (e *env) wantPool(p idkeeper.PoolSpec) {
	e.t.Helper()
	st := e.status()
	if st.Pool.First != p.First || st.Pool.Nodes != p.Nodes || !idkeeper.SameLayout(st.Pool.Layout, p.LayoutOrDefault()) {
		e.t.Fatalf("Status.Pool = %s (%+v), want %s", st.Pool, st.Pool, p)
	}
}

// wantError checks that err is the *idkeeper.Error want: its code, field and text.
func wantError(t *testing.T, what string, err error, want *idkeeper.Error) {
	t.Helper()
	var got *idkeeper.Error
	if !errors.As(err, &got) || got.Code != want.Code || got.Field != want.Field || got.Message != want.Message {
		t.Fatalf("%s: %v, want %v (field %q)", what, err, want, want.Field)
	}
}

// testPoolRange: a pool from 100 on grants only 100..103, in NodeID order, and
// counts as a pool of 4.
func testPoolRange(t *testing.T, open Factory) {
	p := idkeeper.PoolSpec{First: 100, Nodes: 4}
	e := setupPool(t, open, p)
	e.wantCounts(idkeeper.Counts{Total: 4, Remaining: 4})
	e.wantExhausted(req(9), 5, 4)
	for i := range 4 {
		if id := e.allocOne(req(i+1), 10*time.Minute); id != idkeeper.NodeID(100+i) {
			t.Fatalf("Alloc %d of a fresh pool 100..103 = node %d, want %d", i+1, id, 100+i)
		}
	}
	e.wantExhausted(req(9), 1, 0)
	e.check()
	if n := e.remove(req(2), e.now()); n != 1 {
		t.Fatalf("Remove = %d", n)
	}
	if id := e.allocOne(req(5), 10*time.Minute); id != 101 {
		t.Fatalf("Alloc after freeing 101 = node %d", id)
	}
	e.check()
}

// testPoolOutside: node IDs 99 and 104 are outside the pool 100..103: Quarantine
// refuses them (OutsidePool), RevokeLease and Node do not find them, and a claim
// on them is ignored.
func testPoolOutside(t *testing.T, open Factory) {
	e := setupPool(t, open, idkeeper.PoolSpec{First: 100, Nodes: 4})
	t0 := e.now()
	a := e.alloc(req(1), 1, 10*time.Minute).Leases[0]
	e.reset(idkeeper.ResetParams{Seen: e.gen, Pool: idkeeper.PoolSpec{First: 100, Nodes: 4}, Until: t0.Add(time.Hour), MinFence: 10})
	snap := e.snapshot()
	for _, id := range []idkeeper.NodeID{99, 104} {
		wantError(t, "Quarantine of an outside node", e.quarantineRaw(e.now().Add(time.Hour), 100, id),
			idkeeper.OutsidePool(id).(*idkeeper.Error))
		if _, err := e.s.RevokeLease(e.ctx, e.guard(), id, a.FencingToken, time.Minute); !errors.Is(err, idkeeper.ErrNotFound) {
			t.Fatalf("RevokeLease(%d) outside the pool: %v, want ErrNotFound", id, err)
		}
		if _, err := e.s.Node(e.ctx, id); !errors.Is(err, idkeeper.ErrNotFound) {
			t.Fatalf("Node(%d) outside the pool: %v, want ErrNotFound", id, err)
		}
	}
	claims := []idkeeper.Claim{
		{NodeID: 99, Token: 9, NotBefore: t0, ExpiresAt: t0.Add(time.Hour)},
		{NodeID: 104, Token: 9, NotBefore: t0, ExpiresAt: t0.Add(time.Hour)},
	}
	g, err := e.s.Renew(e.ctx, e.guard(), idkeeper.RenewParams{Requester: req(2), KeyID: keyA, Duration: time.Hour, Claims: claims})
	e.must(err, "Renew with claims outside the pool")
	if len(g.Leases) != 0 || len(g.Restored) != 0 || len(g.Contested) != 0 {
		t.Fatalf("Renew with claims outside the pool = %+v, want nothing", g)
	}
	e.wantUnchanged("calls on node IDs outside the pool", snap)
}

// testPoolMismatch: Init, Grow and Reset asked for another First or layout refuse
// with PoolMismatch and change nothing.
func testPoolMismatch(t *testing.T, open Factory) {
	stored := idkeeper.PoolSpec{First: 100, Nodes: 4}
	e := setupPool(t, open, stored)
	e.alloc(req(1), 2, 10*time.Minute)
	snap := e.snapshot()
	storedFull := idkeeper.PoolSpec{First: 100, Nodes: 4, Layout: idkeeper.DefaultLayout}
	for _, asked := range []idkeeper.PoolSpec{
		{First: 0, Nodes: 4},
		{First: 101, Nodes: 4},
		{First: 99, Nodes: 8},
		{First: 100, Nodes: 4, Layout: layout41_10_12},
		{First: 100, Nodes: 8, Layout: idkeeper.Layout{Epoch: idkeeper.DefaultLayout.Epoch.Add(time.Millisecond),
			TimestampBits: 41, NodeBits: 12, SequenceBits: 10}},
		{First: 0, Nodes: 3, Layout: layout41_10_12}, // smaller too: the mismatch is named
	} {
		want := idkeeper.PoolMismatch(storedFull, asked)
		if want.Code != protocol.CodeInvalidRequest {
			t.Fatalf("PoolMismatch is %s, want INVALID_REQUEST", want.Code)
		}
		wantError(t, "Init of "+asked.String(), second(e.s.Init(e.ctx, asked)), want)
		wantError(t, "Grow to "+asked.String(), e.s.Grow(e.ctx, e.guard(), asked), want)
		wantError(t, "Reset to "+asked.String(), second(e.s.Reset(e.ctx, idkeeper.ResetParams{Seen: e.gen, Pool: asked,
			Until: e.now().Add(time.Hour), MinFence: e.fence + 5})), want)
	}
	e.wantUnchanged("refused pool changes", snap)
	e.wantPool(stored)
	if st := e.status(); st.Generation != e.gen {
		t.Fatalf("refused pool changes changed the generation: %+v, want %+v", st.Generation, e.gen)
	}
	// The same space again is no mismatch: Init with the default layout spelt out
	// changes nothing.
	res, err := e.s.Init(e.ctx, storedFull)
	e.must(err, "Init of the stored pool again")
	if res.Fresh || res.Generation != e.gen {
		t.Fatalf("Init of the stored pool again = %+v", res)
	}
	e.wantUnchanged("Init of the stored pool", snap)
}

// testPoolGrow: Init and Grow of the same space grow the pool from its end,
// keeping First; the new node IDs come last in the free order, in NodeID order.
func testPoolGrow(t *testing.T, open Factory) {
	e := setupPool(t, open, idkeeper.PoolSpec{First: 100, Nodes: 4})
	e.alloc(req(1), 4, 10*time.Minute)
	res, err := e.s.Init(e.ctx, idkeeper.PoolSpec{First: 100, Nodes: 6})
	e.must(err, "Init growing the pool")
	if res.Fresh || res.Generation != e.gen {
		t.Fatalf("Init growing the pool = %+v", res)
	}
	e.nodes = 6
	e.wantPool(idkeeper.PoolSpec{First: 100, Nodes: 6})
	e.must(e.s.Grow(e.ctx, e.guard(), idkeeper.PoolSpec{First: 100, Nodes: 8, Layout: idkeeper.DefaultLayout}), "Grow(100, 8)")
	e.nodes = 8
	e.wantPool(idkeeper.PoolSpec{First: 100, Nodes: 8})
	wantError(t, "Grow to fewer", e.s.Grow(e.ctx, e.guard(), idkeeper.PoolSpec{First: 100, Nodes: 7}),
		idkeeper.ShrinkRefused(8, 7).(*idkeeper.Error))
	e.wantCounts(idkeeper.Counts{Total: 8, Remaining: 4, Leased: 4})
	g := e.alloc(req(2), 4, 10*time.Minute)
	for i, l := range g.Leases {
		if l.NodeID != idkeeper.NodeID(104+i) {
			t.Fatalf("Alloc of the grown node IDs = %v, want 104..107", nodeIDs(g.Leases))
		}
	}
	e.check()
}

// testPoolLayout: a pool on a non-default layout (10 node bits: node IDs 0..1023)
// stores and reports it; a pool past node 1023 is refused.
func testPoolLayout(t *testing.T, open Factory) {
	p := idkeeper.PoolSpec{First: 1000, Nodes: 24, Layout: layout41_10_12}
	e := setupPool(t, open, p)
	if st := e.status(); !idkeeper.SameLayout(st.Pool.Layout, layout41_10_12) {
		t.Fatalf("Status.Pool.Layout = %s, want %s", idkeeper.FormatLayout(st.Pool.Layout), idkeeper.FormatLayout(layout41_10_12))
	}
	g := e.alloc(req(1), 24, 10*time.Minute)
	if g.Leases[0].NodeID != 1000 || g.Leases[23].NodeID != 1023 {
		t.Fatalf("Alloc of the whole pool = %v", nodeIDs(g.Leases))
	}
	past := idkeeper.PoolSpec{First: 1000, Nodes: 25, Layout: layout41_10_12}
	wantError(t, "Grow past the layout's last node", e.s.Grow(e.ctx, e.guard(), past), past.Validate().(*idkeeper.Error))
	e.check()
	// The default layout's default: a zero Layout is a pool on the default one,
	// which this store is not on.
	wantError(t, "Init on the default layout", second(e.s.Init(e.ctx, idkeeper.PoolSpec{First: 1000, Nodes: 24})),
		idkeeper.PoolMismatch(idkeeper.PoolSpec{First: 1000, Nodes: 24, Layout: layout41_10_12}, idkeeper.PoolSpec{First: 1000, Nodes: 24}))
}

// testPoolInvalid: pools that cannot be are refused with the INVALID_REQUEST of
// PoolSpec.Validate, before anything is written.
func testPoolInvalid(t *testing.T, open Factory) {
	e := openEnv(t, open)
	bad := idkeeper.Layout{Epoch: idkeeper.DefaultLayout.Epoch, TimestampBits: 40, NodeBits: 12, SequenceBits: 10}
	for _, p := range []idkeeper.PoolSpec{
		{First: -1, Nodes: 4},
		{First: 0, Nodes: 1025, Layout: layout41_10_12},
		{First: 1021, Nodes: 4, Layout: layout41_10_12},
		{First: 4095, Nodes: 2},
		{First: 0, Nodes: 4, Layout: bad},
		{First: 0, Nodes: 0},
	} {
		want, ok := p.Validate().(*idkeeper.Error)
		if !ok {
			t.Fatalf("Validate(%+v) accepts it", p)
		}
		wantError(t, "Init of an invalid pool", second(e.s.Init(e.ctx, p)), want)
		wantError(t, "Reset to an invalid pool", second(e.s.Reset(e.ctx, idkeeper.ResetParams{Pool: p, Until: e.now()})), want)
	}
	if st := e.status(); st.Initialised || st.Pool.Nodes != 0 {
		t.Fatalf("refused Inits wrote %+v", st)
	}
	// The last node ID of the layout is in range.
	e = setupPool(t, open, idkeeper.PoolSpec{First: 1020, Nodes: 4, Layout: layout41_10_12})
	e.alloc(req(1), 4, time.Minute)
	e.check()
}

// testPoolResetWritesSpec: a Reset of a wiped store writes the pool it is given:
// its First and layout, as Init would.
func testPoolResetWritesSpec(t *testing.T, open Factory) {
	e := setupPool(t, open, idkeeper.PoolSpec{First: 100, Nodes: 4, Layout: layout41_10_12})
	w, ok := e.s.(Wiper)
	if !ok {
		t.Skip("the store does not implement storetest.Wiper")
	}
	e.alloc(req(1), 2, 10*time.Minute)
	e.must(w.WipeForTest(e.ctx), "WipeForTest")
	e.wantNothingWritten("a wiped store")
	p := idkeeper.PoolSpec{First: 200, Nodes: 3}
	until := e.now().Add(time.Hour)
	e.first = 200
	e.reset(idkeeper.ResetParams{Seen: e.gen, Pool: p, Until: until, MinFence: e.fence})
	e.nodes = 3
	e.wantPool(p)
	e.wantRaised(nil, until)
	e.wantCounts(idkeeper.Counts{Total: 3, Quarantined: 3})
	wantError(t, "Init of the old pool after the reset", second(e.s.Init(e.ctx, idkeeper.PoolSpec{First: 100, Nodes: 4, Layout: layout41_10_12})),
		idkeeper.PoolMismatch(idkeeper.PoolSpec{First: 200, Nodes: 3, Layout: idkeeper.DefaultLayout},
			idkeeper.PoolSpec{First: 100, Nodes: 4, Layout: layout41_10_12}))
	e.clock.Set(until)
	g := e.alloc(req(2), 3, 10*time.Minute)
	if g.Leases[0].NodeID != 200 || g.Leases[2].NodeID != 202 {
		t.Fatalf("Alloc after the reset = %v, want 200..202", nodeIDs(g.Leases))
	}
	e.check()
}

// testSnapshotPool: a snapshot carries the pool's First and layout and its nodes
// from First on; it loads into an empty store, which then holds that pool; a
// store that holds another space refuses it (PoolMismatch) and stays as it was;
// a snapshot without a layout (an old backup) is on the default layout.
func testSnapshotPool(t *testing.T, open Factory) {
	p := idkeeper.PoolSpec{First: 100, Nodes: 6, Layout: layout41_10_12}
	e := setupPool(t, open, p)
	e.alloc(req(1), 2, 10*time.Minute)
	e.remove(req(1), e.now())
	e.alloc(req(2), 3, time.Hour)
	sn := e.readSnapshot()
	if sn.meta.First != 100 || sn.meta.Nodes != 6 || !idkeeper.SameLayout(sn.meta.Layout, layout41_10_12) {
		t.Fatalf("snapshot meta %s, want pool %s", fmtMeta(sn.meta), p)
	}
	if n := sn.recs[0].Node; n == nil || n.NodeID != 100 {
		t.Fatalf("the snapshot's first record is %s, want node 100", fmtRecord(sn.recs[0]))
	}

	f := openEnv(t, open)
	f.clock.Set(e.clock.Now())
	f.load(sn)
	f.wantPool(p)
	wantSameSnapshot(t, "the snapshot of the loaded store", f.readSnapshot(), sn)
	f.check()
	wantSameState(t, e, f)
	ga, gb := e.alloc(req(3), 3, 10*time.Minute), f.alloc(req(3), 3, 10*time.Minute)
	wantSameGrant(t, "Alloc after the load", ga, gb, true)

	// A store of another space refuses it, and one of another layout.
	for _, other := range []idkeeper.PoolSpec{{Nodes: 6}, {First: 100, Nodes: 6}} {
		g := setupPool(t, open, other)
		g.alloc(req(1), 1, time.Hour)
		before := g.readSnapshot()
		err := g.snap().LoadSnapshot(g.ctx, sn.meta, newSource(sn.recs, -1, nil))
		wantError(t, "LoadSnapshot into another space", err,
			idkeeper.PoolMismatch(idkeeper.PoolSpec{First: other.First, Nodes: 6, Layout: idkeeper.DefaultLayout}, sn.meta.Pool()))
		wantSameSnapshot(t, "the store after a refused load", g.readSnapshot(), before)
		g.check()
	}

	// Node records that do not start at First are refused.
	bad := storeState{meta: sn.meta, recs: sn.recs}
	bad.meta.First = 101
	h := openEnv(t, open)
	wantCode(t, h.snap().LoadSnapshot(h.ctx, bad.meta, newSource(bad.recs, -1, nil)), protocol.CodeInvalidRequest)
	if st := h.status(); st.Initialised || st.Pool.Nodes != 0 {
		t.Fatalf("a refused load wrote %+v", st)
	}

	// An old snapshot: no layout, First 0.
	o := setup(t, open, 4)
	o.alloc(req(1), 1, time.Hour)
	old := o.readSnapshot()
	old.meta.Layout = idkeeper.Layout{}
	o.load(old)
	o.wantPool(idkeeper.PoolSpec{Nodes: 4})
	o.check()
}
