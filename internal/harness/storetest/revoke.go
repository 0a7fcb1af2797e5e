package storetest

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/protocol"
)

// Revoking a live lease (issue #10): LeaseStore.RevokeLease, sentence by sentence.

func (e *env) revokeRaw(id idkeeper.NodeID, token uint64, grace time.Duration) (idkeeper.Lease, error) {
	return e.s.RevokeLease(e.ctx, e.guard(), id, token, grace)
}

// revoke revokes the lease l and checks every rule of a revocation against the
// node's state just before: the lease comes back as it was; it is gone from Node
// and Leases; the watermark is at least its ExpiresAt and otherwise unchanged; the
// quarantine raised to ExpiresAt + grace, never lowered; the Floor and LastToken
// kept, Restorable cleared; no token spent; the key holds one node ID fewer.
func (e *env) revoke(l idkeeper.Lease, grace time.Duration) idkeeper.Lease {
	e.t.Helper()
	before := e.node(l.NodeID)
	if before.Lease == nil || before.Lease.FencingToken != l.FencingToken {
		e.t.Fatalf("revoke: node %d does not hold %s", l.NodeID, fmtLease(l))
	}
	holdings, err := e.s.KeyHoldings(e.ctx)
	e.must(err, "KeyHoldings")
	got, err := e.revokeRaw(l.NodeID, l.FencingToken, grace)
	e.must(err, fmt.Sprintf("RevokeLease(%d, %d)", l.NodeID, l.FencingToken))
	wantLease(e.t, "RevokeLease answer", got, *before.Lease)
	st := e.node(l.NodeID)
	if st.Lease != nil {
		e.t.Fatalf("node %d still held after RevokeLease: %s", l.NodeID, fmtLease(*st.Lease))
	}
	wantTime(e.t, "watermark after RevokeLease", st.Watermark, maxTime(before.Watermark, got.ExpiresAt))
	wantTime(e.t, "QuarantinedUntil after RevokeLease", st.QuarantinedUntil,
		maxTime(before.QuarantinedUntil, got.ExpiresAt.Add(grace)))
	wantTime(e.t, "Floor after RevokeLease", st.Floor, before.Floor)
	if st.LastToken != before.LastToken || st.Restorable {
		e.t.Fatalf("node %d after RevokeLease: LastToken %d, Restorable %v; want %d, false",
			l.NodeID, st.LastToken, st.Restorable, before.LastToken)
	}
	for _, o := range e.leases() {
		if o.NodeID == l.NodeID {
			e.t.Fatalf("Leases() still lists the revoked lease: %s", fmtLease(o))
		}
	}
	if s := e.status(); s.Fence != e.fence {
		e.t.Fatalf("fencing counter %d after RevokeLease, want %d", s.Fence, e.fence)
	}
	after, err := e.s.KeyHoldings(e.ctx)
	e.must(err, "KeyHoldings")
	if after[got.KeyID] != holdings[got.KeyID]-1 {
		e.t.Fatalf("KeyHoldings after RevokeLease = %v, was %v", after, holdings)
	}
	e.freed([]idkeeper.Lease{got})
	e.check()
	return got
}

// wantRevokeNotFound checks that revoking token on id is ErrNotFound and changes
// nothing.
func (e *env) wantRevokeNotFound(what string, id idkeeper.NodeID, token uint64) {
	e.t.Helper()
	snap := e.snapshot()
	leases := e.leases()
	_, err := e.revokeRaw(id, token, 10*time.Minute)
	if !errors.Is(err, idkeeper.ErrNotFound) {
		e.t.Fatalf("RevokeLease(%d, %d) of %s: err = %v, want ErrNotFound", id, token, what, err)
	}
	e.wantUnchanged("RevokeLease of "+what, snap)
	wantSameLeases(e.t, "leases after RevokeLease of "+what, e.leases(), leases)
}

// testRevokeEndsLease: the lease is deleted at once and comes back as it was; the
// node is counted Quarantined until ExpiresAt + grace, then free; the key's
// holdings drop; the holder's next Renew returns its other leases, not this one.
func testRevokeEndsLease(t *testing.T, open Factory) {
	e := setup(t, open, 4)
	e.alloc(req(1), 2, 10*time.Minute)
	e.alloc(req(2), 1, 10*time.Minute)
	e.advance(time.Minute)
	e.renew(req(1), time.Hour)
	e.advance(time.Minute)
	held := e.heldBy(req(1))
	victim, kept := held[0], held[1]
	grace := 10 * time.Minute
	l := e.revoke(victim, grace)
	wantTime(t, "revoked lease's ExpiresAt", l.ExpiresAt, victim.ExpiresAt)
	e.wantCounts(idkeeper.Counts{Total: 4, Remaining: 1, Leased: 2, Quarantined: 1})
	// The holder's next Renew extends what it still holds, and only that: fewer
	// node IDs than it had, which the client library treats as a lost session.
	rg := e.renew(req(1), time.Hour)
	if len(rg.Leases) != 1 || rg.Leases[0].NodeID != kept.NodeID || rg.Leases[0].FencingToken != kept.FencingToken {
		t.Fatalf("Renew after RevokeLease = %v, want only node %d", nodeIDs(rg.Leases), kept.NodeID)
	}
	e.check()
	// Quarantined up to ExpiresAt + grace, whatever Reclaim does meanwhile.
	e.clock.Set(l.ExpiresAt.Add(grace - ms))
	e.reclaim(0)
	if st := e.node(l.NodeID); st.Lease != nil || !st.QuarantinedUntil.After(e.now()) {
		t.Fatalf("node %d before ExpiresAt + grace: %+v", l.NodeID, st)
	}
	e.check()
	// Then free: ready, as its watermark (the revoked ExpiresAt) lies behind.
	e.clock.Set(l.ExpiresAt.Add(grace))
	e.check()
	if st := e.node(l.NodeID); st.QuarantinedUntil.After(e.now()) || !st.Fenced().Before(e.now()) {
		t.Fatalf("node %d at ExpiresAt + grace: %+v, want free and ready", l.NodeID, st)
	}
}

// testRevokeNotFound: a wrong token, a free node, a node outside the pool: ErrNotFound,
// nothing changed. Tokens of another lease, older grants of the node and a revoked
// lease's own token (a second RevokeLease) are wrong tokens.
func testRevokeNotFound(t *testing.T, open Factory) {
	e := setup(t, open, 4)
	old := e.alloc(req(1), 1, 10*time.Minute).Leases[0]
	e.remove(req(1), e.now()) // free, LastToken the old grant's
	a := e.alloc(req(2), 1, 10*time.Minute).Leases[0]
	b := e.alloc(req(3), 1, 10*time.Minute).Leases[0]
	e.wantRevokeNotFound("a wrong token", a.NodeID, a.FencingToken+1)
	e.wantRevokeNotFound("a token below the lease's", a.NodeID, a.FencingToken-1)
	e.wantRevokeNotFound("another lease's token", a.NodeID, b.FencingToken)
	e.wantRevokeNotFound("token 0", a.NodeID, 0)
	e.wantRevokeNotFound("a token above the last", a.NodeID, idkeeper.MaxFencingToken+1)
	if st := e.node(old.NodeID); st.Lease == nil {
		e.wantRevokeNotFound("a free node, with its last grant's token", old.NodeID, old.FencingToken)
	}
	for id := range e.nodes {
		if st := e.node(idkeeper.NodeID(id)); st.Lease == nil {
			e.wantRevokeNotFound("a free node", idkeeper.NodeID(id), st.LastToken)
		}
	}
	e.wantRevokeNotFound("a node outside the pool", idkeeper.NodeID(e.nodes), a.FencingToken)
	e.wantRevokeNotFound("a negative node", -1, a.FencingToken)
	e.revoke(a, time.Minute)
	e.wantRevokeNotFound("a revoked lease", a.NodeID, a.FencingToken)
}

// testRevokeLastLease: revoking the holder's only lease leaves it holding
// nothing: its Renew answers the empty list, and its requester may Alloc anew.
func testRevokeLastLease(t *testing.T, open Factory) {
	e := setup(t, open, 3)
	l := e.alloc(req(1), 1, 10*time.Minute).Leases[0]
	e.revoke(l, 10*time.Minute)
	if g := e.renew(req(1), time.Hour); len(g.Leases) != 0 {
		t.Fatalf("Renew after the only lease was revoked = %v, want the empty list", g.Leases)
	}
	if n := e.remove(req(1), e.now()); n != 0 {
		t.Fatalf("Remove after RevokeLease released %d", n)
	}
	g := e.alloc(req(1), 2, 10*time.Minute)
	for _, nl := range g.Leases {
		if nl.NodeID == l.NodeID {
			t.Fatalf("Alloc granted the revoked node %d inside its quarantine", l.NodeID)
		}
	}
}

// testRevokeClaimsIgnored: a claim of the revoked grant (an authentic receipt its
// holder still sends) is not news: it neither restores the node nor contests it,
// whoever sends it, even after a store reset made every node restorable again.
func testRevokeClaimsIgnored(t *testing.T, open Factory) {
	e := setup(t, open, 3)
	e.alloc(req(1), 2, 10*time.Minute)
	e.renew(req(1), time.Hour)
	held := e.heldBy(req(1))
	l := e.revoke(held[0], 10*time.Minute)
	claim := idkeeper.Claim{NodeID: l.NodeID, Token: l.FencingToken, NotBefore: l.NotBefore, ExpiresAt: l.ExpiresAt}
	was := e.node(l.NodeID)
	rg := e.renewClaims(req(1), time.Hour, 10*time.Minute, []idkeeper.Claim{claim}, nil, nil)
	if len(rg.Leases) != 1 || rg.Leases[0].NodeID != held[1].NodeID {
		t.Fatalf("Renew with the revoked lease's claim = %v, want only node %d", nodeIDs(rg.Leases), held[1].NodeID)
	}
	e.renewClaims(req(4), time.Hour, 10*time.Minute, []idkeeper.Claim{claim}, nil, nil)
	if st := e.node(l.NodeID); st.Lease != nil || st.LastToken != was.LastToken ||
		!st.QuarantinedUntil.Equal(was.QuarantinedUntil) || !st.Watermark.Equal(was.Watermark) {
		t.Fatalf("node %d after claims of its revoked grant: %+v, was %+v", l.NodeID, st, was)
	}
	// After a reset every node is restorable again; the claim is still not news.
	e.advance(time.Minute)
	e.afterReset(e.fence, e.now().Add(time.Minute))
	if !e.node(l.NodeID).Restorable {
		t.Fatal("Reset did not make the revoked node restorable")
	}
	e.renewClaims(req(1), time.Hour, 10*time.Minute, []idkeeper.Claim{claim}, nil, nil)
	e.renewClaims(req(5), time.Hour, 10*time.Minute, []idkeeper.Claim{claim}, nil, nil)
	if st := e.node(l.NodeID); st.Lease != nil || st.LastToken != l.FencingToken {
		t.Fatalf("a claim of the revoked grant after a reset: node %+v", st)
	}
}

// testRevokeNoAllocBeforeGrace: no Alloc, by anyone, gets the node before the
// revoked lease's ExpiresAt + grace; at that instant one does, its window starting
// after that ExpiresAt. With grace 0 the quarantine ends at ExpiresAt.
func testRevokeNoAllocBeforeGrace(t *testing.T, open Factory) {
	for _, grace := range []time.Duration{0, 10 * time.Minute} {
		t.Run(fmt.Sprint("grace", grace), func(t *testing.T) {
			e := setup(t, open, 2)
			e.alloc(req(1), 1, 10*time.Minute)
			e.alloc(req(2), 1, time.Hour)
			e.renew(req(1), 30*time.Minute)
			l := e.heldBy(req(1))[0]
			e.advance(time.Minute)
			e.revoke(l, grace)
			for _, at := range []time.Time{e.now(), l.ExpiresAt.Add(-ms), l.ExpiresAt.Add(grace - ms)} {
				if at.Before(e.now()) {
					continue
				}
				e.clock.Set(at)
				e.wantExhausted(req(1), 1, 0)
				e.wantExhausted(req(3), 1, 0)
				e.check()
			}
			e.clock.Set(l.ExpiresAt.Add(grace))
			ng := e.alloc(req(3), 1, 10*time.Minute).Leases[0]
			if ng.NodeID != l.NodeID || !ng.NotBefore.After(l.ExpiresAt) {
				t.Fatalf("Alloc at ExpiresAt + grace = %s; want node %d with NotBefore after %s",
					fmtLease(ng), l.NodeID, fmtTime(l.ExpiresAt))
			}
		})
	}
}

// testRevokeInGrace: a lease whose ExpiresAt has passed is revoked the same way:
// inside the grace it is quarantined until ExpiresAt + grace; past it (before
// Reclaim ran) it is free at once, and Reclaim has nothing left to delete.
func testRevokeInGrace(t *testing.T, open Factory) {
	e := setup(t, open, 3)
	a := e.alloc(req(1), 1, 10*time.Minute).Leases[0]
	b := e.alloc(req(2), 1, 10*time.Minute).Leases[0]
	grace := 10 * time.Minute
	e.clock.Set(a.ExpiresAt.Add(5 * time.Minute))
	e.wantCounts(idkeeper.Counts{Total: 3, Remaining: 1, InGrace: 2})
	e.revoke(a, grace)
	e.wantCounts(idkeeper.Counts{Total: 3, Remaining: 1, InGrace: 1, Quarantined: 1})
	wantTime(t, "quarantine of a lease revoked in grace", e.node(a.NodeID).QuarantinedUntil, a.ExpiresAt.Add(grace))
	e.clock.Set(b.ExpiresAt.Add(grace + time.Minute)) // past grace, not reclaimed yet
	e.revoke(b, grace)
	if st := e.node(b.NodeID); st.QuarantinedUntil.After(e.now()) {
		t.Fatalf("a lease revoked past its grace quarantined its node until %s", fmtTime(st.QuarantinedUntil))
	}
	e.wantCounts(idkeeper.Counts{Total: 3, Remaining: 3})
	if n := e.reclaim(grace); n != 0 {
		t.Fatalf("Reclaim after RevokeLease = %d, want 0", n)
	}
}

// testRevokeKeepsHigherState: a quarantine already later than ExpiresAt + grace is
// not lowered, a reset's Floor stays, Restorable is cleared, and another key's lease
// is revoked all the same (an operator's act, no owner check).
func testRevokeKeepsHigherState(t *testing.T, open Factory) {
	e := setup(t, open, 3)
	t0 := e.now()
	l := e.allocP(idkeeper.AllocParams{Requester: req(1), KeyID: keyB, Count: 1, First: 10 * time.Minute}).Leases[0]
	e.quarantine(t0.Add(5*time.Hour), l.NodeID)
	e.afterReset(e.fence, t0.Add(2*time.Hour))
	if st := e.node(l.NodeID); !st.Restorable || st.Lease == nil {
		t.Fatalf("held node after Reset: %+v", st)
	}
	e.revoke(l, 10*time.Minute) // checks QuarantinedUntil stays t0+5h, Floor t0+2h, Restorable cleared
	wantTime(t, "QuarantinedUntil", e.node(l.NodeID).QuarantinedUntil, t0.Add(5*time.Hour))
	e.clock.Set(t0.Add(5*time.Hour - ms))
	e.wantExhausted(req(2), 3, 2)
	e.clock.Set(t0.Add(5 * time.Hour))
	e.alloc(req(2), 3, 10*time.Minute) // each window after its fenced watermark (allocP checks)
}

// testRevokeBackOfFreeOrder: the revoked node goes to the back of the free order:
// among ready nodes, a node freed earlier is granted first.
func testRevokeBackOfFreeOrder(t *testing.T, open Factory) {
	e := setup(t, open, 3)
	a := e.alloc(req(1), 1, time.Minute).Leases[0]
	b := e.alloc(req(2), 1, time.Minute).Leases[0]
	e.advance(2 * time.Minute)
	e.revoke(a, 0) // past ExpiresAt, grace 0: ready at once
	e.remove(req(2), time.Time{})
	e.advance(time.Minute)
	g := e.alloc(req(3), 2, time.Minute) // the never-used node, then a (freed before b)
	if !sameSet(nodeIDs(g.Leases), a.NodeID, 2) {
		t.Fatalf("Alloc(2) = %v, want the never-used node and %d (freed before %d)", nodeIDs(g.Leases), a.NodeID, b.NodeID)
	}
}

// testRevokeGuarded: RevokeLease checks the guard first: a guard of another
// generation, a token above the counter, or a clock apart refuses it and nothing is
// written; a negative grace is an INVALID_REQUEST Error before the guard.
func testRevokeGuarded(t *testing.T, open Factory) {
	e := setup(t, open, 2)
	l := e.alloc(req(1), 1, 10*time.Minute).Leases[0]
	snap := e.snapshot()
	leases := e.leases()
	bad := []struct {
		what string
		edit func(*idkeeper.Guard)
		want error
	}{
		{"no generation", func(g *idkeeper.Guard) { g.Generation = "" }, idkeeper.ErrGenerationChanged},
		{"another generation", func(g *idkeeper.Guard) { g.Generation = "another" }, idkeeper.ErrGenerationChanged},
		{"a token above the counter", func(g *idkeeper.Guard) { g.MinFence = e.fence + 1 }, idkeeper.ErrFenceRegression},
		{"a clock apart", func(g *idkeeper.Guard) { g.Now, g.MaxSkew = e.now().Add(time.Hour), time.Second }, idkeeper.ErrStoreClockSkew},
	}
	for _, c := range bad {
		g := e.guard()
		c.edit(&g)
		_, err := e.s.RevokeLease(e.ctx, g, l.NodeID, l.FencingToken, time.Minute)
		if !errors.Is(err, c.want) {
			t.Fatalf("RevokeLease with %s: err = %v, want %v", c.what, err, c.want)
		}
		// Nor does a guard failure tell whether the lease exists.
		_, err = e.s.RevokeLease(e.ctx, g, l.NodeID, l.FencingToken+1, time.Minute)
		if !errors.Is(err, c.want) {
			t.Fatalf("RevokeLease of a wrong token with %s: err = %v, want %v", c.what, err, c.want)
		}
	}
	stale := idkeeper.Guard{Generation: "not-this-one"}
	_, err := e.s.RevokeLease(e.ctx, stale, l.NodeID, l.FencingToken, -time.Second)
	var ie, want *idkeeper.Error
	if !errors.As(err, &ie) || !errors.As(idkeeper.CheckGrace(-time.Second), &want) ||
		ie.Code != protocol.CodeInvalidRequest || ie.Field != want.Field || ie.Message != want.Message {
		t.Fatalf("RevokeLease with a negative grace: %v, want %v", err, idkeeper.CheckGrace(-time.Second))
	}
	e.wantUnchanged("refused RevokeLease", snap)
	wantSameLeases(t, "leases after refused RevokeLease", e.leases(), leases)
	e.revoke(l, time.Minute)
}

// testRevokeNotInitialised: on a store without a generation RevokeLease fails its
// guard (ErrStoreReset) and writes nothing.
func testRevokeNotInitialised(t *testing.T, open Factory) {
	e := openEnv(t, open)
	for _, g := range []idkeeper.Guard{e.guard(), {}} {
		_, err := e.s.RevokeLease(e.ctx, g, 0, 1, time.Minute)
		if !errors.Is(err, idkeeper.ErrStoreReset) || !errors.Is(err, idkeeper.ErrGenerationChanged) {
			t.Fatalf("RevokeLease on an empty store: err = %v, want ErrStoreReset (ErrGenerationChanged)", err)
		}
	}
	if st := e.status(); st.Initialised || st.Pool.Nodes != 0 {
		t.Fatalf("Status after RevokeLease on an empty store = %+v", st)
	}
}
