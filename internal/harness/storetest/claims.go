package storetest

import (
	"slices"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/protocol"
)

// renewClaims renews r with keyA and the given claims and checks the answer's
// restored and contested node IDs.
func (e *env) renewClaims(r idkeeper.Requester, d, grace time.Duration, claims []idkeeper.Claim, restored, contested []idkeeper.NodeID) idkeeper.Grant {
	e.t.Helper()
	g, err := e.s.Renew(e.ctx, e.guard(), idkeeper.RenewParams{Requester: r, KeyID: keyA, Duration: d, Grace: grace, Claims: claims})
	e.must(err, "Renew with claims")
	wantTime(e.t, "Renew Grant.Now", g.Now, e.now())
	if !slices.Equal(g.Restored, restored) || !slices.Equal(g.Contested, contested) {
		e.t.Fatalf("Renew with claims restored %v, contested %v; want %v, %v", g.Restored, g.Contested, restored, contested)
	}
	e.check()
	return g
}

// afterReset resets the store, raising the fence to fence, with a floor and
// quarantine of until.
func (e *env) afterReset(fence uint64, until time.Time) {
	e.t.Helper()
	e.reset(idkeeper.ResetParams{Seen: e.gen, Pool: poolOf(e.nodes), Until: until, MinFence: fence})
}

// testClaimRestore: after a reset, a live claim of a grant the store forgot
// restores the lease on a restorable node: the claim's token, its window start,
// its end extended as by a Renew; the node stays quarantined for when it is freed.
func testClaimRestore(t *testing.T, open Factory) {
	e := setup(t, open, 4)
	t0 := e.now()
	until := t0.Add(50 * time.Hour)
	e.afterReset(10, until) // as if tokens up to 10 had been handed out and forgotten
	e.advance(time.Minute)
	r := req(1)
	c := idkeeper.Claim{NodeID: 2, Token: 7, NotBefore: t0.Add(-5 * time.Minute), ExpiresAt: t0.Add(10 * time.Minute)}
	before := e.node(2)
	g := e.renewClaims(r, 48*time.Hour, 10*time.Minute, []idkeeper.Claim{c}, []idkeeper.NodeID{2}, nil)
	now := e.now()
	want := idkeeper.Lease{NodeID: 2, Requester: r, KeyID: keyA, NotBefore: c.NotBefore, ExpiresAt: now.Add(48 * time.Hour),
		FencingToken: 7, GrantedAt: now, RenewedAt: now}
	wantSameLeases(t, "restored lease", g.Leases, []idkeeper.Lease{want})
	st := e.node(2)
	wantTime(t, "watermark after restore", st.Watermark, want.ExpiresAt)
	wantTime(t, "floor after restore", st.Floor, before.Floor)
	wantTime(t, "quarantine after restore", st.QuarantinedUntil, before.QuarantinedUntil)
	if st.LastToken != 7 || st.Restorable {
		t.Fatalf("node after restore: LastToken %d, Restorable %v; want 7, false", st.LastToken, st.Restorable)
	}
	e.wantCounts(idkeeper.Counts{Total: 4, Leased: 1, Quarantined: 3})
	if hs, _ := e.s.KeyHoldings(e.ctx); hs[keyA] != 1 {
		t.Fatalf("KeyHoldings after restore = %v", hs)
	}
	// The restored lease is an ordinary one from now on.
	if rg := e.renew(r, time.Hour); len(rg.Leases) != 1 || rg.Leases[0].FencingToken != 7 {
		t.Fatalf("Renew after restore = %v", rg.Leases)
	}
	// A claim again, now that the node is held by r: nothing happens.
	e.renewClaims(r, time.Hour, 10*time.Minute, []idkeeper.Claim{c}, nil, nil)
	e.remove(r, now)
	e.wantCounts(idkeeper.Counts{Total: 4, Quarantined: 4}) // freed into the reset's quarantine
	// Fresh grants go on above the raised fence: alloc checks the token is 11.
	e.clock.Set(until)
	e.alloc(req(2), 1, 10*time.Minute)
}

// testClaimRestoreWindow: the restored window starts after the store's own
// watermark for the node when that is later than the claim's start, never after
// the floor the reset raised.
func testClaimRestoreWindow(t *testing.T, open Factory) {
	e := setup(t, open, 1)
	t0 := e.now()
	e.alloc(req(1), 1, 10*time.Minute)
	minted := t0.Add(3 * time.Minute)
	e.remove(req(1), minted)
	until := t0.Add(50 * time.Hour)
	e.afterReset(5, until)
	c := idkeeper.Claim{NodeID: 0, Token: 3, NotBefore: t0.Add(time.Minute), ExpiresAt: t0.Add(15 * time.Minute)}
	g := e.renewClaims(req(2), 48*time.Hour, 0, []idkeeper.Claim{c}, []idkeeper.NodeID{0}, nil)
	wantTime(t, "restored NotBefore", g.Leases[0].NotBefore, minted.Add(ms))
	if g.Leases[0].NotBefore.After(until) || !g.Leases[0].NotBefore.After(c.NotBefore) {
		t.Fatalf("restored NotBefore %s: want after the own watermark, not the floor", fmtTime(g.Leases[0].NotBefore))
	}
}

// testClaimIgnoredWithoutReset: without a reset no node is restorable: a claim
// that the store does not know is not restored.
func testClaimIgnoredWithoutReset(t *testing.T, open Factory) {
	e := setup(t, open, 2)
	e.alloc(req(1), 1, 10*time.Minute)
	snap := e.snapshot()
	c := idkeeper.Claim{NodeID: 1, Token: 99, NotBefore: e.now(), ExpiresAt: e.now().Add(time.Hour)}
	if g := e.renewClaims(req(2), time.Hour, 0, []idkeeper.Claim{c}, nil, nil); len(g.Leases) != 0 {
		t.Fatalf("a claim without a reset restored %v", g.Leases)
	}
	e.wantUnchanged("a claim without a reset", snap)
}

// testClaimIgnoredWhenKnown: a claim whose token the node's LastToken covers is
// a grant the store knows: released, or older than the node's latest. It restores
// nothing, even after a reset, and contests nobody.
func testClaimIgnoredWhenKnown(t *testing.T, open Factory) {
	e := setup(t, open, 2)
	g1 := e.alloc(req(1), 1, 10*time.Minute)
	e.remove(req(1), e.now())
	g2 := e.alloc(req(2), 1, 10*time.Minute) // the other node, token 2
	e.afterReset(2, e.now().Add(time.Hour))
	snap := e.snapshot()
	exp := e.now().Add(10 * time.Minute)
	old := idkeeper.Claim{NodeID: g1.Leases[0].NodeID, Token: 1, NotBefore: e.now(), ExpiresAt: exp}
	e.renewClaims(req(1), time.Hour, 0, []idkeeper.Claim{old}, nil, nil)
	older := idkeeper.Claim{NodeID: g2.Leases[0].NodeID, Token: 1, NotBefore: e.now(), ExpiresAt: exp}
	e.renewClaims(req(3), time.Hour, 0, []idkeeper.Claim{older}, nil, nil)
	e.wantUnchanged("known claims", snap)
}

// testClaimIgnoredWhenDead: a claim that ended before now cannot come from a holder
// still minting: it restores and contests nothing.
func testClaimIgnoredWhenDead(t *testing.T, open Factory) {
	e := setup(t, open, 2)
	e.alloc(req(2), 1, time.Hour)
	e.afterReset(9, e.now().Add(time.Hour))
	e.advance(time.Minute)
	snap := e.snapshot()
	dead := []idkeeper.Claim{
		{NodeID: 1, Token: 5, NotBefore: e.now().Add(-time.Hour), ExpiresAt: e.now().Add(-ms)},
		{NodeID: 0, Token: 6, NotBefore: e.now().Add(-time.Hour), ExpiresAt: e.now().Add(-time.Second)},
	}
	e.renewClaims(req(1), time.Hour, 0, dead, nil, nil)
	e.wantUnchanged("dead claims", snap)
}

// testClaimContest: a live claim the store does not know, on a node another
// requester holds, stops both: the lease goes, the node is quarantined past both
// windows + grace, and the claimant does not get it.
func testClaimContest(t *testing.T, open Factory) {
	e := setup(t, open, 2)
	other := e.alloc(req(2), 1, 10*time.Minute).Leases[0]
	e.renew(req(2), 2*time.Hour)
	e.afterReset(8, e.now().Add(time.Minute))
	e.advance(time.Minute)
	c := idkeeper.Claim{NodeID: other.NodeID, Token: 5, NotBefore: e.now(), ExpiresAt: e.now().Add(3 * time.Hour)}
	grace := 10 * time.Minute
	g := e.renewClaims(req(1), time.Hour, grace, []idkeeper.Claim{c}, nil, []idkeeper.NodeID{other.NodeID})
	if len(g.Leases) != 0 {
		t.Fatalf("the claimant of a contested node got %v", g.Leases)
	}
	st := e.node(other.NodeID)
	if st.Lease != nil || st.LastToken != 5 || st.Restorable {
		t.Fatalf("contested node = %+v, want free, LastToken 5, not restorable", st)
	}
	wantTime(t, "watermark of a contested node", st.Watermark, c.ExpiresAt)
	wantTime(t, "quarantine of a contested node", st.QuarantinedUntil, c.ExpiresAt.Add(grace))
	if rg := e.renew(req(2), time.Hour); len(rg.Leases) != 0 {
		t.Fatalf("the holder of a contested node still holds %v", rg.Leases)
	}
	if hs, _ := e.s.KeyHoldings(e.ctx); hs[keyA] != 0 {
		t.Fatalf("KeyHoldings after a contest = %v", hs)
	}
	e.freed([]idkeeper.Lease{other})
	// Nobody restores it afterwards, whatever the token.
	later := c
	later.Token = 6
	e.renewClaims(req(3), time.Hour, grace, []idkeeper.Claim{later}, nil, nil)
}

// testClaimSecondReceipt: after a node was restored for one holder, a second
// authentic claim of a later forgotten grant stops both; a claim of an earlier
// grant than the restored one is ignored.
func testClaimSecondReceipt(t *testing.T, open Factory) {
	e := setup(t, open, 1)
	e.afterReset(20, e.now().Add(time.Hour))
	exp := e.now().Add(30 * time.Minute)
	e.renewClaims(req(1), time.Hour, 0, []idkeeper.Claim{{NodeID: 0, Token: 10, NotBefore: e.now(), ExpiresAt: exp}}, []idkeeper.NodeID{0}, nil)
	e.renewClaims(req(2), time.Hour, 0, []idkeeper.Claim{{NodeID: 0, Token: 9, NotBefore: e.now(), ExpiresAt: exp}}, nil, nil)
	if g := e.renew(req(1), time.Hour); len(g.Leases) != 1 {
		t.Fatalf("an older claim took the restored lease: %v", g.Leases)
	}
	held := e.heldBy(req(1))
	e.renewClaims(req(3), time.Hour, 0, []idkeeper.Claim{{NodeID: 0, Token: 11, NotBefore: e.now(), ExpiresAt: exp}}, nil, []idkeeper.NodeID{0})
	e.freed(held)
	if g := e.renew(req(1), time.Hour); len(g.Leases) != 0 {
		t.Fatalf("the restored holder kept a contested node: %v", g.Leases)
	}
}

// testClaimNotOwned: claims in a Renew that another key's requester sends are not
// looked at: LEASE_NOT_OWNED, nothing changed.
func testClaimNotOwned(t *testing.T, open Factory) {
	e := setup(t, open, 2)
	e.allocP(idkeeper.AllocParams{Requester: req(1), KeyID: keyB, Count: 1, First: time.Hour})
	e.afterReset(5, e.now().Add(time.Hour))
	snap := e.snapshot()
	_, err := e.s.Renew(e.ctx, e.guard(), idkeeper.RenewParams{Requester: req(1), KeyID: keyA, Duration: time.Hour,
		Claims: []idkeeper.Claim{{NodeID: 1, Token: 4, NotBefore: e.now(), ExpiresAt: e.now().Add(time.Hour)}}})
	wantCode(t, err, protocol.CodeLeaseNotOwned)
	e.wantUnchanged("a Renew by another key", snap)
}
