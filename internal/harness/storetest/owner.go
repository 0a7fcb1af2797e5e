package storetest

import (
	"testing"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/protocol"
)

const keyB = "key-b"

// testOwnership: a lease belongs to the key that allocated it (DESIGN §3). Another
// key's Alloc, Renew and Remove of that requester answer LEASE_NOT_OWNED and change
// nothing: no expiry moves, no watermark drops.
func testOwnership(t *testing.T, open Factory) {
	e := setup(t, open, 4)
	r := req(1)
	g := e.alloc(r, 2, 10*time.Minute)
	e.advance(time.Minute)
	snap := e.snapshot()
	leases := e.leases()
	gd := e.guard()
	_, err := e.s.Alloc(e.ctx, gd, idkeeper.AllocParams{Requester: r, KeyID: keyB, Count: 2, First: time.Hour})
	wantCode(t, err, protocol.CodeLeaseNotOwned)
	_, err = e.s.Alloc(e.ctx, gd, idkeeper.AllocParams{Requester: r, KeyID: keyB, Count: 1, First: time.Hour})
	wantCode(t, err, protocol.CodeLeaseNotOwned)
	_, err = e.s.Renew(e.ctx, gd, idkeeper.RenewParams{Requester: r, KeyID: keyB, Duration: 48 * time.Hour})
	wantCode(t, err, protocol.CodeLeaseNotOwned)
	_, err = e.s.Remove(e.ctx, gd, idkeeper.RemoveParams{Requester: r, KeyID: keyB, MintedUpTo: time.Time{}.Add(ms)})
	wantCode(t, err, protocol.CodeLeaseNotOwned)
	_, err = e.s.Remove(e.ctx, gd, idkeeper.RemoveParams{Requester: r, KeyID: "", MintedUpTo: e.now()})
	wantCode(t, err, protocol.CodeLeaseNotOwned)
	e.wantUnchanged("another key's calls", snap)
	wantSameLeases(t, "leases after another key's calls", e.leases(), leases)

	// A requester that holds nothing is anybody's: another key's Renew and Remove
	// find nothing, its Alloc gets its own leases.
	if n, err := e.s.Remove(e.ctx, gd, idkeeper.RemoveParams{Requester: req(2), KeyID: keyB}); err != nil || n != 0 {
		t.Fatalf("Remove of a requester holding nothing = %d, %v", n, err)
	}
	gb := e.allocP(idkeeper.AllocParams{Requester: req(2), KeyID: keyB, Count: 1, First: 10 * time.Minute})
	if gb.Leases[0].KeyID != keyB {
		t.Fatalf("lease granted to key B has KeyID %q", gb.Leases[0].KeyID)
	}
	// The owner's calls work.
	if rg := e.renew(r, time.Hour); len(rg.Leases) != 2 || rg.Leases[0].KeyID != keyA {
		t.Fatalf("owner's Renew = %v", rg.Leases)
	}
	e.remove(r, g.Leases[0].NotBefore)
}

// testQuota: a key's quota caps the node IDs its leases hold together; a refused
// Alloc grants nothing and spends no token; released node IDs count no more.
func testQuota(t *testing.T, open Factory) {
	e := setup(t, open, 8)
	p := func(i, count int) idkeeper.AllocParams {
		return idkeeper.AllocParams{Requester: req(i), KeyID: keyA, Count: count, First: 10 * time.Minute, MaxNodes: 3}
	}
	e.allocP(p(1, 2))
	e.allocP(idkeeper.AllocParams{Requester: req(9), KeyID: keyB, Count: 4, First: 10 * time.Minute, MaxNodes: 4})
	snap := e.snapshot()
	_, err := e.s.Alloc(e.ctx, e.guard(), p(2, 2))
	wantCode(t, err, protocol.CodeAPIKeyQuotaExceeded)
	wantDetail(t, err, "maxNodes", 3)
	wantDetail(t, err, "held", 2)
	wantDetail(t, err, "requested", 2)
	e.wantUnchanged("an Alloc over the quota", snap)
	// The repeated Alloc of a holder is no new grant: the quota does not apply.
	if _, err := e.s.Alloc(e.ctx, e.guard(), idkeeper.AllocParams{Requester: req(1), KeyID: keyA, Count: 2, First: time.Minute, MaxNodes: 1}); err != nil {
		t.Fatalf("repeated Alloc of a holder over a lowered quota: %v", err)
	}
	e.allocP(p(2, 1))                  // exactly the quota; checks the token is the next one
	e.remove(req(1), e.now().Add(-ms)) // ready at once: charged to nobody
	e.allocP(p(3, 2))
}

// testKeyHoldings: KeyHoldings counts the node IDs each key's leases hold, through
// grants, removes and reclaims.
func testKeyHoldings(t *testing.T, open Factory) {
	e := setup(t, open, 8)
	want := func(w map[string]int) {
		t.Helper()
		got, err := e.s.KeyHoldings(e.ctx)
		e.must(err, "KeyHoldings")
		if len(got) != len(w) {
			t.Fatalf("KeyHoldings = %v, want %v", got, w)
		}
		for k, n := range w {
			if got[k] != n {
				t.Fatalf("KeyHoldings = %v, want %v", got, w)
			}
		}
	}
	want(map[string]int{})
	e.alloc(req(1), 2, 10*time.Minute)
	e.allocP(idkeeper.AllocParams{Requester: req(2), KeyID: keyB, Count: 3, First: time.Minute})
	e.alloc(req(3), 1, time.Hour)
	want(map[string]int{keyA: 3, keyB: 3})
	e.remove(req(1), time.Time{})
	want(map[string]int{keyA: 1, keyB: 3})
	e.advance(2 * time.Minute)
	e.reclaim(0)
	want(map[string]int{keyA: 1})
}

// testTokenCeiling: tokens never pass 2^53−1: the grant that would is refused and
// changes nothing; the counter never wraps.
func testTokenCeiling(t *testing.T, open Factory) {
	e := setup(t, open, 4)
	e.reset(idkeeper.ResetParams{Seen: e.gen, Pool: poolOf(4), Until: e.now(), MinFence: idkeeper.MaxFencingToken - 2})
	e.advance(ms)
	g := e.alloc(req(1), 2, 10*time.Minute)
	if top := g.Leases[1].FencingToken; top != idkeeper.MaxFencingToken {
		t.Fatalf("last token = %d, want 2^53-1", top)
	}
	snap := e.snapshot()
	_, err := e.allocRaw(req(2), 1, 10*time.Minute)
	if err == nil || protocol.ErrorCode(err) == protocol.CodeNodeIDsExhausted {
		t.Fatalf("Alloc past 2^53-1: %v, want a failing store error", err)
	}
	e.wantUnchanged("an Alloc past the last token", snap)
	if st := e.status(); st.Fence != idkeeper.MaxFencingToken {
		t.Fatalf("fencing counter = %d, want 2^53-1", st.Fence)
	}
}
