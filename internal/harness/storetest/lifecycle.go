package storetest

import (
	"testing"
	"time"

	"github.com/idkeeper/idkeeper"
)

func testRenewExtends(t *testing.T, open Factory) {
	e := setup(t, open, 4)
	r := req(1)
	g := e.alloc(r, 2, 10*time.Minute)
	other := e.alloc(req(2), 1, 10*time.Minute)
	now := e.advance(time.Minute)
	rg := e.renew(r, 48*time.Hour)
	want := append([]idkeeper.Lease(nil), g.Leases...)
	for i := range want {
		want[i].ExpiresAt, want[i].RenewedAt = now.Add(48*time.Hour), now
	}
	wantSameLeases(t, "renewed leases", rg.Leases, want)
	for _, l := range rg.Leases {
		wantTime(t, "watermark after Renew", e.node(l.NodeID).Watermark, l.ExpiresAt)
	}
	wantLease(t, "another requester's lease", *e.node(other.Leases[0].NodeID).Lease, other.Leases[0])
	e.check()
}

func testRenewNeverShortens(t *testing.T, open Factory) {
	e := setup(t, open, 2)
	r := req(1)
	e.alloc(r, 1, 10*time.Minute)
	long := e.renew(r, 48*time.Hour).Leases[0]
	now := e.advance(time.Hour)
	got := e.renew(r, 10*time.Minute).Leases[0]
	want := long
	want.RenewedAt = now
	wantLease(t, "Renew with a shorter duration", got, want)
	wantTime(t, "watermark", e.node(got.NodeID).Watermark, long.ExpiresAt)
	e.check()
}

func testRenewRevivesExpired(t *testing.T, open Factory) {
	e := setup(t, open, 2)
	r := req(1)
	e.alloc(r, 1, 10*time.Minute)
	now := e.advance(30 * time.Minute)
	e.wantCounts(idkeeper.Counts{Total: 2, Remaining: 1, InGrace: 1})
	rg := e.renew(r, 48*time.Hour)
	if len(rg.Leases) != 1 {
		t.Fatalf("Renew of an expired, unreclaimed lease = %d leases, want 1", len(rg.Leases))
	}
	wantTime(t, "revived ExpiresAt", rg.Leases[0].ExpiresAt, now.Add(48*time.Hour))
	e.wantCounts(idkeeper.Counts{Total: 2, Remaining: 1, Leased: 1})
	if n := e.reclaim(10 * time.Minute); n != 0 {
		t.Fatalf("Reclaim after the revival deleted %d", n)
	}
}

func testRenewHoldsNothing(t *testing.T, open Factory) {
	e := setup(t, open, 2)
	wantEmpty := func(what string, g idkeeper.Grant) {
		t.Helper()
		if len(g.Leases) != 0 {
			t.Fatalf("Renew %s = %v, want an empty list", what, nodeIDs(g.Leases))
		}
	}
	wantEmpty("of an unknown requester", e.renew(req(9), time.Hour))
	e.alloc(req(1), 1, 10*time.Minute)
	e.remove(req(1), time.Time{})
	wantEmpty("after Remove", e.renew(req(1), time.Hour))
	e.alloc(req(2), 1, 10*time.Minute)
	e.advance(30 * time.Minute)
	if n := e.reclaim(10 * time.Minute); n != 1 {
		t.Fatalf("Reclaim = %d, want 1", n)
	}
	wantEmpty("after Reclaim", e.renew(req(2), time.Hour))
	e.check()
}

func testRemoveCountAndReuse(t *testing.T, open Factory) {
	e := setup(t, open, 2)
	t0 := e.now()
	e.alloc(req(1), 2, 10*time.Minute)
	snap := e.snapshot()
	if n := e.remove(req(9), e.now()); n != 0 {
		t.Fatalf("Remove of an unknown requester = %d, want 0", n)
	}
	e.wantUnchanged("Remove of an unknown requester", snap)
	e.advance(time.Minute)
	if n := e.remove(req(1), time.Time{}); n != 2 {
		t.Fatalf("Remove = %d, want 2", n)
	}
	// Without mintedUpTo both cool until the lease's expiry: remaining, not ready.
	e.wantCounts(cooling(idkeeper.Counts{Total: 2}, 0, 2, t0.Add(10*time.Minute+ms)))
	if n := e.remove(req(1), time.Time{}); n != 0 {
		t.Fatalf("second Remove = %d, want 0", n)
	}
	if g := e.renew(req(1), time.Hour); len(g.Leases) != 0 {
		t.Fatalf("Renew after Remove = %v, want empty", nodeIDs(g.Leases))
	}
	// No grace: both node IDs go to the next requester at once.
	e.alloc(req(2), 2, 10*time.Minute)
}

func testRemoveZeroMintedUpTo(t *testing.T, open Factory) {
	e := setup(t, open, 1)
	t0 := e.now()
	e.alloc(req(1), 1, 10*time.Minute)
	e.advance(time.Minute)
	e.remove(req(1), time.Time{})
	st := e.node(0)
	if st.Lease != nil {
		t.Fatalf("node 0 still held after Remove: %s", fmtLease(*st.Lease))
	}
	wantTime(t, "watermark after Remove without mintedUpTo", st.Watermark, t0.Add(10*time.Minute))
	e.alloc(req(2), 1, 10*time.Minute)
}

func testRemoveMintedUpTo(t *testing.T, open Factory) {
	e := setup(t, open, 1)
	t0 := e.now()
	e.alloc(req(1), 1, 10*time.Minute)
	e.advance(2 * time.Minute)
	e.remove(req(1), t0.Add(time.Minute))
	// The watermark falls from the expiry to what the holder attests.
	wantTime(t, "watermark", e.node(0).Watermark, t0.Add(time.Minute))
	g := e.alloc(req(2), 1, 10*time.Minute)
	if l := g.Leases[0]; l.NotBefore.After(e.now()) {
		t.Fatalf("after a Remove with mintedUpTo, NotBefore %s is in the future", fmtTime(l.NotBefore))
	}
}

func testRemoveMintedUpToClamped(t *testing.T, open Factory) {
	e := setup(t, open, 1)
	t0 := e.now()
	e.alloc(req(1), 1, 10*time.Minute)
	e.advance(time.Minute)
	e.remove(req(1), t0.Add(time.Hour))
	wantTime(t, "watermark after mintedUpTo past the expiry", e.node(0).Watermark, t0.Add(10*time.Minute))
}

func testRemoveNotBeforeFloor(t *testing.T, open Factory) {
	e := setup(t, open, 1)
	t0 := e.now()
	e.alloc(req(1), 1, 10*time.Minute)
	e.remove(req(1), time.Time{})
	e.advance(time.Minute)
	g := e.alloc(req(2), 1, 10*time.Minute)
	wantTime(t, "NotBefore", g.Leases[0].NotBefore, t0.Add(10*time.Minute+ms))
	e.remove(req(2), t0.Add(5*time.Minute))
	wantTime(t, "watermark after mintedUpTo before NotBefore", e.node(0).Watermark, t0.Add(10*time.Minute))
}

func testRemoveQuarantineFloor(t *testing.T, open Factory) {
	e := setup(t, open, 2)
	t0 := e.now()
	a := e.allocOne(req(1), 10*time.Minute)
	e.quarantine(t0.Add(time.Hour), a)
	e.advance(time.Minute)
	e.remove(req(1), t0)
	st := e.node(a)
	wantTime(t, "watermark of a node quarantined while held", st.Watermark, t0.Add(time.Hour))
	wantTime(t, "QuarantinedUntil", st.QuarantinedUntil, t0.Add(time.Hour))
	e.wantCounts(idkeeper.Counts{Total: 2, Remaining: 1, Quarantined: 1})

	// A quarantine that has ended sets no floor.
	t1 := e.now()
	b := e.allocOne(req(2), 10*time.Minute)
	e.quarantine(t1.Add(time.Minute), b)
	e.advance(2 * time.Minute)
	e.remove(req(2), t1.Add(time.Minute-ms))
	wantTime(t, "watermark after an ended quarantine", e.node(b).Watermark, t1.Add(time.Minute-ms))
	e.wantCounts(idkeeper.Counts{Total: 2, Remaining: 1, Quarantined: 1})
}

func testReclaimOnlyPastGrace(t *testing.T, open Factory) {
	e := setup(t, open, 4)
	t0 := e.now()
	a := e.allocOne(req(1), 10*time.Minute)
	b := e.alloc(req(2), 1, 20*time.Minute).Leases[0]
	e.clock.Set(t0.Add(10 * time.Minute))
	e.wantCounts(idkeeper.Counts{Total: 4, Remaining: 2, Leased: 2})
	e.clock.Set(t0.Add(10*time.Minute + ms))
	e.wantCounts(idkeeper.Counts{Total: 4, Remaining: 2, Leased: 1, InGrace: 1})
	e.clock.Set(t0.Add(15 * time.Minute)) // ExpiresAt + grace == now: not yet
	if n := e.reclaim(5 * time.Minute); n != 0 {
		t.Fatalf("Reclaim at exactly expiry+grace = %d, want 0", n)
	}
	e.clock.Set(t0.Add(15*time.Minute + ms))
	if n := e.reclaim(5 * time.Minute); n != 1 {
		t.Fatalf("Reclaim past expiry+grace = %d, want 1", n)
	}
	if n := e.reclaim(5 * time.Minute); n != 0 {
		t.Fatalf("second Reclaim = %d, want 0", n)
	}
	st := e.node(a)
	if st.Lease != nil {
		t.Fatalf("reclaimed node %d still held", a)
	}
	wantTime(t, "watermark after Reclaim", st.Watermark, t0.Add(10*time.Minute))
	wantSameLeases(t, "leases left", e.leases(), []idkeeper.Lease{b})
	e.wantCounts(idkeeper.Counts{Total: 4, Remaining: 3, Leased: 1})
}

func testReclaimGraceZero(t *testing.T, open Factory) {
	e := setup(t, open, 1)
	e.alloc(req(1), 1, 10*time.Minute)
	e.advance(10 * time.Minute)
	if n := e.reclaim(0); n != 0 {
		t.Fatalf("Reclaim(0) at the expiry = %d, want 0", n)
	}
	e.advance(ms)
	if n := e.reclaim(0); n != 1 {
		t.Fatalf("Reclaim(0) past the expiry = %d, want 1", n)
	}
}

func testReclaimRenewedStays(t *testing.T, open Factory) {
	e := setup(t, open, 2)
	e.alloc(req(1), 1, 10*time.Minute)
	e.advance(30 * time.Minute)
	l := e.renew(req(1), 48*time.Hour).Leases[0]
	if n := e.reclaim(10 * time.Minute); n != 0 {
		t.Fatalf("Reclaim of a renewed lease = %d, want 0", n)
	}
	wantSameLeases(t, "leases", e.leases(), []idkeeper.Lease{l})
}

func testReclaimBackOfOrder(t *testing.T, open Factory) {
	e := setup(t, open, 4)
	t0 := e.now()
	a := e.allocOne(req(1), 10*time.Minute)
	b := e.allocOne(req(2), 10*time.Minute)
	c := e.allocOne(req(3), 10*time.Minute)
	d := e.allocOne(req(4), 10*time.Minute)
	e.renew(req(4), 48*time.Hour)
	e.advance(30 * time.Minute)
	e.remove(req(3), t0) // c: freed before the reclaim
	e.advance(ms)
	if n := e.reclaim(10 * time.Minute); n != 2 {
		t.Fatalf("Reclaim = %d, want 2", n)
	}
	for _, id := range []idkeeper.NodeID{a, b} {
		wantTime(t, "watermark after Reclaim", e.node(id).Watermark, t0.Add(10*time.Minute))
	}
	e.advance(ms)
	e.remove(req(4), t0) // d: freed after the reclaim
	if got := e.allocOne(req(5), 10*time.Minute); got != c {
		t.Fatalf("Alloc = %d, want %d, freed before the reclaim", got, c)
	}
	if got := nodeIDs(e.alloc(req(6), 2, 10*time.Minute).Leases); !sameSet(got, a, b) {
		t.Fatalf("Alloc(2) = %v, want the reclaimed [%d %d]", got, a, b)
	}
	if got := e.allocOne(req(7), 10*time.Minute); got != d {
		t.Fatalf("Alloc = %d, want %d, freed after the reclaim", got, d)
	}
}
