package storetest

import (
	"testing"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/protocol"
)

func testQuarantineNeverLowers(t *testing.T, open Factory) {
	e := setup(t, open, 2)
	t0 := e.now()
	e.quarantine(t0.Add(2*time.Hour), 0)
	e.quarantine(t0.Add(time.Hour), 0)
	wantTime(t, "QuarantinedUntil after a lower Quarantine", e.node(0).QuarantinedUntil, t0.Add(2*time.Hour))
	e.quarantine(t0.Add(3*time.Hour), 0, 1)
	wantTime(t, "QuarantinedUntil of node 0", e.node(0).QuarantinedUntil, t0.Add(3*time.Hour))
	wantTime(t, "QuarantinedUntil of node 1", e.node(1).QuarantinedUntil, t0.Add(3*time.Hour))
	e.wantCounts(idkeeper.Counts{Total: 2, Quarantined: 2})
}

func testQuarantineFree(t *testing.T, open Factory) {
	e := setup(t, open, 3)
	t0 := e.now()
	e.quarantine(t0.Add(time.Hour), 1)
	wantTime(t, "QuarantinedUntil", e.node(1).QuarantinedUntil, t0.Add(time.Hour))
	e.wantCounts(idkeeper.Counts{Total: 3, Remaining: 2, Quarantined: 1})
	// A quarantine that ends before now makes no node unallocatable.
	e.quarantine(t0.Add(-time.Minute), 2)
	wantTime(t, "QuarantinedUntil in the past", e.node(2).QuarantinedUntil, t0.Add(-time.Minute))
	e.wantCounts(idkeeper.Counts{Total: 3, Remaining: 2, Quarantined: 1})
	if got := nodeIDs(e.alloc(req(1), 2, 10*time.Minute).Leases); !sameSet(got, 0, 2) {
		t.Fatalf("Alloc(2) = %v, want [0 2]", got)
	}
}

func testQuarantineHeld(t *testing.T, open Factory) {
	e := setup(t, open, 2)
	t0 := e.now()
	a := e.allocOne(req(1), 10*time.Minute)
	b := e.allocOne(req(2), 10*time.Minute)
	e.quarantine(t0.Add(time.Hour), a)
	if st := e.node(a); st.Lease == nil {
		t.Fatalf("Quarantine took away the lease of node %d", a)
	}
	e.wantCounts(idkeeper.Counts{Total: 2, Leased: 2})
	if g := e.renew(req(1), 48*time.Hour); len(g.Leases) != 1 {
		t.Fatalf("Renew of a quarantined held node = %d leases, want 1", len(g.Leases))
	}
	e.remove(req(1), time.Time{})
	e.wantCounts(idkeeper.Counts{Total: 2, Leased: 1, Quarantined: 1})
	e.wantExhausted(req(3), 1, 0)

	// Reclaim frees into quarantine too.
	e.quarantine(t0.Add(100*time.Hour), b)
	e.clock.Set(t0.Add(time.Hour - ms))
	if n := e.reclaim(10 * time.Minute); n != 1 {
		t.Fatalf("Reclaim = %d, want 1", n)
	}
	e.wantCounts(idkeeper.Counts{Total: 2, Quarantined: 2})
	e.wantExhausted(req(3), 1, 0)
	e.clock.Set(t0.Add(time.Hour))
	// a's quarantine ended, but its watermark (the renewed expiry) lies ahead.
	e.wantCounts(cooling(idkeeper.Counts{Total: 2, Quarantined: 1}, 0, 1, t0.Add(48*time.Hour+ms)))
	if got := e.allocOne(req(3), 10*time.Minute); got != a {
		t.Fatalf("Alloc after the quarantine = %d, want %d", got, a)
	}
}

func testQuarantineOutOfPool(t *testing.T, open Factory) {
	e := setup(t, open, 2)
	snap := e.snapshot()
	for _, ids := range [][]idkeeper.NodeID{{0, 2}, {-1}, {1, 4096}} {
		err := e.quarantineRaw(e.now().Add(time.Hour), ids...)
		wantCode(t, err, protocol.CodeInvalidRequest)
	}
	e.wantUnchanged("refused Quarantine", snap)
}

func testCountsEveryState(t *testing.T, open Factory) {
	e := setup(t, open, 6)
	t0 := e.now()
	e.alloc(req(1), 1, 10*time.Minute)
	e.alloc(req(2), 1, 48*time.Hour)
	e.alloc(req(3), 1, time.Hour)
	e.remove(req(3), time.Time{}) // cooling until t0+1h
	var free idkeeper.NodeID = -1
	for id := range 6 {
		if st := e.node(idkeeper.NodeID(id)); st.Lease == nil && st.Watermark.IsZero() {
			free = idkeeper.NodeID(id)
			break
		}
	}
	e.quarantine(t0.Add(2*time.Hour), free)
	coolAt := t0.Add(time.Hour + ms)
	e.wantCounts(cooling(idkeeper.Counts{Total: 6, Leased: 2, Quarantined: 1}, 2, 1, coolAt))
	e.advance(11 * time.Minute)
	e.check()
	e.wantCounts(cooling(idkeeper.Counts{Total: 6, Leased: 1, InGrace: 1, Quarantined: 1}, 2, 1, coolAt))
	if n := e.reclaim(10 * time.Minute); n != 0 {
		t.Fatalf("Reclaim inside the grace = %d", n)
	}
	e.advance(10 * time.Minute)
	if n := e.reclaim(10 * time.Minute); n != 1 {
		t.Fatalf("Reclaim = %d, want 1", n)
	}
	e.wantCounts(cooling(idkeeper.Counts{Total: 6, Leased: 1, Quarantined: 1}, 3, 1, coolAt))
	e.clock.Set(t0.Add(2 * time.Hour))
	e.check()
	e.wantCounts(idkeeper.Counts{Total: 6, Remaining: 5, Leased: 1})
}
