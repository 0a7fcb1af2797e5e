package storetest

import (
	"testing"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/protocol"
)

// snapshot is every node's state, to check that a refused call changed nothing.
func (e *env) snapshot() []idkeeper.NodeState {
	e.t.Helper()
	out := make([]idkeeper.NodeState, e.nodes)
	for i := range e.nodes {
		out[i] = e.node(e.first + idkeeper.NodeID(i))
	}
	return out
}

func (e *env) wantUnchanged(what string, snap []idkeeper.NodeState) {
	e.t.Helper()
	for i, was := range snap {
		id := e.first + idkeeper.NodeID(i)
		st := e.node(id)
		if !st.Watermark.Equal(was.Watermark) || !st.QuarantinedUntil.Equal(was.QuarantinedUntil) ||
			!st.Floor.Equal(was.Floor) || st.LastToken != was.LastToken || st.Restorable != was.Restorable ||
			(st.Lease == nil) != (was.Lease == nil) {
			e.t.Fatalf("%s changed node %d: %+v, was %+v", what, id, st, was)
		}
		if st.Lease != nil {
			wantLease(e.t, what, *st.Lease, *was.Lease)
		}
	}
	if st := e.status(); st.Fence != e.fence {
		e.t.Fatalf("%s: fencing counter %d, want %d", what, st.Fence, e.fence)
	}
	e.check()
}

func testAllocGrant(t *testing.T, open Factory) {
	e := setup(t, open, 8)
	e.alloc(req(1), 3, 10*time.Minute)
	e.wantCounts(idkeeper.Counts{Total: 8, Remaining: 5, Leased: 3})
	e.alloc(req(2), 5, 20*time.Minute)
	e.wantCounts(idkeeper.Counts{Total: 8, Leased: 8})
	if ls := e.leases(); len(ls) != 8 {
		t.Fatalf("Leases() = %d leases, want 8", len(ls))
	}
}

func testAllocExhausted(t *testing.T, open Factory) {
	e := setup(t, open, 4)
	e.alloc(req(1), 3, 10*time.Minute)
	snap := e.snapshot()
	e.wantExhausted(req(2), 2, 1)
	e.wantExhausted(req(2), 5, 1)
	e.wantUnchanged("refused Alloc", snap)
	if g := e.renew(req(2), time.Hour); len(g.Leases) != 0 {
		t.Fatalf("a refused Alloc left leases %v", nodeIDs(g.Leases))
	}
	// No fencing token was spent: alloc checks the next one is fence+1.
	e.alloc(req(2), 1, 10*time.Minute)
	e.wantExhausted(req(3), 1, 0)
}

func testAllocIdempotent(t *testing.T, open Factory) {
	e := setup(t, open, 8)
	r := req(1)
	g1 := e.alloc(r, 2, 10*time.Minute)
	now := e.advance(3 * time.Minute)
	g2, err := e.allocRaw(r, 2, 10*time.Minute)
	e.must(err, "Alloc again")
	wantTime(t, "Grant.Now", g2.Now, now)
	if g2.Fence != g1.Fence {
		t.Fatalf("repeated Alloc moved the fence %d → %d", g1.Fence, g2.Fence)
	}
	want := append([]idkeeper.Lease(nil), g1.Leases...)
	for i := range want {
		want[i].ExpiresAt = now.Add(10 * time.Minute)
	}
	wantSameLeases(t, "repeated Alloc", g2.Leases, want)
	for _, l := range g2.Leases {
		wantTime(t, "watermark after repeated Alloc", e.node(l.NodeID).Watermark, l.ExpiresAt)
	}
	e.wantCounts(idkeeper.Counts{Total: 8, Remaining: 6, Leased: 2})

	// A lease already longer than now+first is never shortened.
	rg := e.renew(r, 48*time.Hour)
	e.advance(time.Minute)
	g3, err := e.allocRaw(r, 2, 10*time.Minute)
	e.must(err, "Alloc after Renew")
	wantSameLeases(t, "Alloc after Renew", g3.Leases, rg.Leases)
	for _, l := range g3.Leases {
		wantTime(t, "watermark", e.node(l.NodeID).Watermark, l.ExpiresAt)
	}
	e.check()
}

func testAllocIdempotentRevives(t *testing.T, open Factory) {
	e := setup(t, open, 2)
	r := req(1)
	g1 := e.alloc(r, 1, 10*time.Minute)
	now := e.advance(15 * time.Minute)
	e.wantCounts(idkeeper.Counts{Total: 2, Remaining: 1, InGrace: 1})
	g2, err := e.allocRaw(r, 1, 10*time.Minute)
	e.must(err, "Alloc of an expired, unreclaimed lease")
	want := g1.Leases[0]
	want.ExpiresAt = now.Add(10 * time.Minute)
	wantSameLeases(t, "revived lease", g2.Leases, []idkeeper.Lease{want})
	wantTime(t, "watermark", e.node(want.NodeID).Watermark, want.ExpiresAt)
	e.wantCounts(idkeeper.Counts{Total: 2, Remaining: 1, Leased: 1})
	e.check()
}

func testAllocCountMismatch(t *testing.T, open Factory) {
	e := setup(t, open, 8)
	r := req(1)
	e.alloc(r, 2, 10*time.Minute)
	snap := e.snapshot()
	e.advance(time.Minute)
	for _, n := range []int{3, 1} {
		_, err := e.allocRaw(r, n, 10*time.Minute)
		wantCode(t, err, protocol.CodeRequesterCountMismatch)
		wantDetail(t, err, "held", 2)
		wantDetail(t, err, "requested", n)
	}
	e.wantUnchanged("Alloc with another count", snap)
	e.alloc(req(2), 1, 10*time.Minute)
}

func testAllocFencingTokens(t *testing.T, open Factory) {
	e := setup(t, open, 8)
	g1 := e.alloc(req(1), 2, 10*time.Minute)
	g2 := e.alloc(req(2), 3, 10*time.Minute)
	if g1.Fence == 0 || g2.Fence <= g1.Fence {
		t.Fatalf("fences %d then %d, want growing", g1.Fence, g2.Fence)
	}
	rg := e.renew(req(1), time.Hour)
	for i, l := range rg.Leases {
		if l.FencingToken != g1.Leases[i].FencingToken {
			t.Fatalf("Renew changed a fencing token %d → %d", g1.Leases[i].FencingToken, l.FencingToken)
		}
	}
	e.remove(req(1), time.Time{})
	g3 := e.alloc(req(1), 2, 10*time.Minute)
	for _, l := range g3.Leases {
		if l.FencingToken <= g2.Fence {
			t.Fatalf("a new grant got token %d, not above the earlier %d", l.FencingToken, g2.Fence)
		}
	}
}

func testAllocWindow(t *testing.T, open Factory) {
	e := setup(t, open, 1)
	t0 := e.now()
	e.alloc(req(1), 1, 10*time.Minute)
	e.renew(req(1), 48*time.Hour)
	wantTime(t, "watermark after Renew", e.node(0).Watermark, t0.Add(48*time.Hour))
	e.remove(req(1), time.Time{})
	e.advance(time.Minute)
	// alloc checks NotBefore = watermark + 1 ms; the watermark must not fall to
	// the new, shorter ExpiresAt.
	g := e.alloc(req(2), 1, 10*time.Minute)
	wantTime(t, "NotBefore", g.Leases[0].NotBefore, t0.Add(48*time.Hour+ms))
	wantTime(t, "watermark", e.node(0).Watermark, t0.Add(48*time.Hour))
}

func testOrderLeastRecentlyFreed(t *testing.T, open Factory) {
	e := setup(t, open, 4)
	t0 := e.now()
	var ids [4]idkeeper.NodeID
	for i := range ids {
		ids[i] = e.allocOne(req(i), 10*time.Minute)
	}
	e.advance(time.Minute)
	for _, i := range []int{2, 0, 3, 1} {
		// mintedUpTo t0 puts the watermark in the past: every node is ready.
		e.remove(req(i), t0)
		e.advance(ms)
	}
	g := e.alloc(req(10), 2, 10*time.Minute)
	if got := nodeIDs(g.Leases); !sameSet(got, ids[2], ids[0]) {
		t.Fatalf("Alloc(2) = %v, want the two least recently freed %v", got, []idkeeper.NodeID{ids[2], ids[0]})
	}
	if got := e.allocOne(req(11), 10*time.Minute); got != ids[3] {
		t.Fatalf("Alloc = %d, want the least recently freed %d", got, ids[3])
	}
	if got := e.allocOne(req(12), 10*time.Minute); got != ids[1] {
		t.Fatalf("Alloc = %d, want the last one %d", got, ids[1])
	}
}

func testOrderReadyBeforeCooling(t *testing.T, open Factory) {
	e := setup(t, open, 2)
	t0 := e.now()
	a := e.allocOne(req(0), 10*time.Minute)
	b := e.allocOne(req(1), 10*time.Minute)
	e.advance(time.Minute)
	e.remove(req(0), time.Time{}) // a: watermark t0+10m, cooling
	e.advance(ms)
	e.remove(req(1), t0) // b: watermark t0, ready
	if got := e.allocOne(req(2), 10*time.Minute); got != b {
		t.Fatalf("Alloc = %d, want the ready node %d before the cooling %d", got, b, a)
	}
	g := e.alloc(req(3), 1, 10*time.Minute)
	if l := g.Leases[0]; l.NodeID != a || !l.NotBefore.After(e.now()) {
		t.Fatalf("Alloc = %s, want cooling node %d with NotBefore in the future", fmtLease(l), a)
	}
}

func testOrderCoolingByWatermark(t *testing.T, open Factory) {
	e := setup(t, open, 3)
	a := e.allocOne(req(0), 20*time.Minute)
	b := e.allocOne(req(1), 10*time.Minute)
	c := e.allocOne(req(2), 15*time.Minute)
	e.advance(time.Minute)
	for i := range 3 {
		e.remove(req(i), time.Time{})
		e.advance(ms)
	}
	for i, want := range []idkeeper.NodeID{b, c, a} {
		if got := e.allocOne(req(10+i), time.Minute); got != want {
			t.Fatalf("cooling pick %d = node %d, want %d (lowest watermark first)", i, got, want)
		}
	}
}

func testOrderCoolingTurnsReady(t *testing.T, open Factory) {
	e := setup(t, open, 2)
	t0 := e.now()
	a := e.allocOne(req(0), 10*time.Minute)
	b := e.allocOne(req(1), 10*time.Minute)
	e.advance(time.Minute)
	e.remove(req(0), time.Time{}) // a: cooling until t0+10m, freed first
	e.advance(ms)
	e.remove(req(1), t0) // b: ready, freed second
	e.clock.Set(t0.Add(10*time.Minute + ms))
	e.check()
	// Both are ready now: least recently freed wins.
	if got := e.allocOne(req(2), 10*time.Minute); got != a {
		t.Fatalf("Alloc = %d, want %d: freed first, and ready once its watermark passed", got, a)
	}
	if got := e.allocOne(req(3), 10*time.Minute); got != b {
		t.Fatalf("Alloc = %d, want %d", got, b)
	}
}

func testAllocQuarantinedSkipped(t *testing.T, open Factory) {
	e := setup(t, open, 3)
	until := e.now().Add(time.Hour)
	e.quarantine(until, 1)
	g := e.alloc(req(0), 2, 10*time.Minute)
	if got := nodeIDs(g.Leases); !sameSet(got, 0, 2) {
		t.Fatalf("Alloc(2) = %v, want [0 2], skipping quarantined node 1", got)
	}
	e.wantExhausted(req(1), 1, 0)
	e.wantCounts(idkeeper.Counts{Total: 3, Leased: 2, Quarantined: 1})
	e.clock.Set(until.Add(-ms))
	e.wantExhausted(req(1), 1, 0)
	e.clock.Set(until)
	if got := e.allocOne(req(1), 10*time.Minute); got != 1 {
		t.Fatalf("Alloc at the quarantine's end = %d, want 1", got)
	}
}

// sameSet reports whether got holds exactly want, in any order.
func sameSet(got []idkeeper.NodeID, want ...idkeeper.NodeID) bool {
	if len(got) != len(want) {
		return false
	}
	seen := make(map[idkeeper.NodeID]bool, len(got))
	for _, id := range got {
		seen[id] = true
	}
	for _, id := range want {
		if !seen[id] {
			return false
		}
	}
	return len(seen) == len(want)
}
