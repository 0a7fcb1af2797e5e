package storetest

import (
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/protocol"
)

// Cooling charges (issue #29, finding 3): node IDs cooling because of a key's
// Remove count against that key's quota until they are ready (LeaseStore.Remove).

var quotaCases = []testCase{
	{"Quota/CoolingCounts", testQuotaCoolingCounts},
	{"Quota/CoolingEndsWhenReady", testQuotaCoolingEndsWhenReady},
	{"Quota/OtherKeysCoolingFree", testQuotaOtherKeysCooling},
	{"Quota/MintedUpToReadyNotCharged", testQuotaMintedUpToReady},
	{"Quota/GrantEndsCharge", testQuotaGrantEndsCharge},
	{"Quota/ResetDoesNotExtendCharge", testQuotaResetKeepsCharge},
	{"Quota/RemoveCycleStops", testQuotaRemoveCycle},
}

// wantKeyCooling checks KeyCooling.
func (e *env) wantKeyCooling(what string, want map[string]int) {
	e.t.Helper()
	got, err := e.s.KeyCooling(e.ctx)
	e.must(err, "KeyCooling")
	if len(got) != len(want) || !maps.Equal(got, want) {
		e.t.Fatalf("%s: KeyCooling = %v, want %v", what, got, want)
	}
}

// quotaAlloc is an Alloc by key for requester i under quota max.
func quotaAlloc(key string, i, count, max int) idkeeper.AllocParams {
	return idkeeper.AllocParams{Requester: req(i), KeyID: key, Count: count, First: 10 * time.Minute, MaxNodes: max}
}

// removeAs releases the leases of r, which key owns.
func (e *env) removeAs(key string, r idkeeper.Requester, mintedUpTo time.Time) {
	e.t.Helper()
	held := e.heldBy(r)
	n, err := e.s.Remove(e.ctx, e.guard(), idkeeper.RemoveParams{Requester: r, KeyID: key, MintedUpTo: mintedUpTo})
	e.must(err, fmt.Sprintf("Remove(%s) by %s", r, key))
	if n == 0 || n != len(held) {
		e.t.Fatalf("Remove(%s) by %s released %d, it held %d", r, key, n, len(held))
	}
	e.freed(held)
	e.check()
}

// wantQuotaRefused checks that p is refused as over the quota, with the charge
// held (cooling of it), changing nothing.
func (e *env) wantQuotaRefused(p idkeeper.AllocParams, held, cooling int) {
	e.t.Helper()
	snap := e.snapshot()
	_, err := e.s.Alloc(e.ctx, e.guard(), p)
	wantCode(e.t, err, protocol.CodeAPIKeyQuotaExceeded)
	wantDetail(e.t, err, "maxNodes", p.MaxNodes)
	wantDetail(e.t, err, "held", held)
	wantDetail(e.t, err, "cooling", cooling)
	wantDetail(e.t, err, "requested", p.Count)
	e.wantUnchanged("an Alloc over the quota", snap)
}

// testQuotaCoolingCounts: node IDs a key's Remove without mintedUpTo left cooling
// count against its quota, with its leases, and show in KeyCooling.
func testQuotaCoolingCounts(t *testing.T, open Factory) {
	e := setup(t, open, 8)
	e.allocP(quotaAlloc(keyA, 1, 2, 3))
	e.renew(req(1), 48*time.Hour)
	e.wantKeyCooling("while leased", map[string]int{})
	e.removeAs(keyA, req(1), time.Time{})
	e.wantKeyCooling("after a Remove without mintedUpTo", map[string]int{keyA: 2})
	e.wantQuotaRefused(quotaAlloc(keyA, 2, 2, 3), 2, 2)
	e.allocP(quotaAlloc(keyA, 2, 1, 3)) // 2 cooling + 1 leased: the quota
	e.wantQuotaRefused(quotaAlloc(keyA, 3, 1, 3), 3, 2)
	// Without a quota the charge refuses nothing.
	e.allocP(quotaAlloc(keyA, 3, 1, 0))
	if hs, err := e.s.KeyHoldings(e.ctx); err != nil || hs[keyA] != 2 {
		t.Fatalf("KeyHoldings = %v, %v; want the 2 leases of %s only", hs, err, keyA)
	}
}

// testQuotaCoolingEndsWhenReady: the charge lasts while the node's fenced
// watermark is at or after now, and ends the millisecond it passes, with no call
// in between.
func testQuotaCoolingEndsWhenReady(t *testing.T, open Factory) {
	e := setup(t, open, 4)
	t0 := e.now()
	e.allocP(quotaAlloc(keyA, 1, 1, 2))
	e.renew(req(1), time.Hour) // watermark t0+1h
	e.allocP(quotaAlloc(keyA, 2, 1, 2))
	e.renew(req(2), 2*time.Hour) // watermark t0+2h
	e.removeAs(keyA, req(1), time.Time{})
	e.removeAs(keyA, req(2), time.Time{})
	e.wantKeyCooling("after the Removes", map[string]int{keyA: 2})
	e.wantQuotaRefused(quotaAlloc(keyA, 3, 1, 2), 2, 2)
	e.clock.Set(t0.Add(time.Hour)) // at the first watermark: still cooling
	e.wantKeyCooling("at the first watermark", map[string]int{keyA: 2})
	e.clock.Set(t0.Add(time.Hour + ms))
	e.wantKeyCooling("past the first watermark", map[string]int{keyA: 1})
	e.wantQuotaRefused(quotaAlloc(keyA, 3, 2, 2), 1, 1)
	e.allocP(quotaAlloc(keyA, 3, 1, 2))
	e.clock.Set(t0.Add(2*time.Hour + ms))
	e.wantKeyCooling("past both watermarks", map[string]int{})
	e.allocP(quotaAlloc(keyA, 4, 1, 2))
	e.check()
}

// testQuotaOtherKeysCooling: another key's cooling node IDs count against that
// key only.
func testQuotaOtherKeysCooling(t *testing.T, open Factory) {
	e := setup(t, open, 8)
	e.allocP(quotaAlloc(keyB, 1, 3, 3))
	e.removeAs(keyB, req(1), time.Time{})
	e.wantKeyCooling("after key B's Remove", map[string]int{keyB: 3})
	e.allocP(quotaAlloc(keyA, 2, 2, 2)) // A's quota is all A's
	e.wantQuotaRefused(quotaAlloc(keyB, 3, 1, 3), 3, 3)
	e.wantKeyCooling("after A's grant of ready node IDs", map[string]int{keyB: 3})
}

// testQuotaMintedUpToReady: a Remove with mintedUpTo that makes the node IDs
// ready at once charges nobody; one that leaves them cooling (mintedUpTo ahead of
// now) charges the key.
func testQuotaMintedUpToReady(t *testing.T, open Factory) {
	e := setup(t, open, 6)
	t0 := e.now()
	e.allocP(quotaAlloc(keyA, 1, 2, 2))
	e.renew(req(1), 48*time.Hour)
	e.advance(time.Minute)
	e.removeAs(keyA, req(1), t0.Add(30*time.Second))
	e.wantKeyCooling("after a Remove that made its node IDs ready", map[string]int{})
	e.allocP(quotaAlloc(keyA, 2, 2, 2))
	e.removeAs(keyA, req(2), e.now().Add(time.Hour)) // attests minting ahead: cooling an hour
	e.wantKeyCooling("after a Remove with mintedUpTo ahead of now", map[string]int{keyA: 2})
	e.wantQuotaRefused(quotaAlloc(keyA, 3, 1, 2), 2, 2)
}

// testQuotaGrantEndsCharge: a grant of a cooling node ID (to another key, the
// pool having nothing ready) ends the charge of the key that cooled it.
func testQuotaGrantEndsCharge(t *testing.T, open Factory) {
	e := setup(t, open, 2)
	e.allocP(quotaAlloc(keyA, 1, 2, 2))
	e.removeAs(keyA, req(1), time.Time{})
	e.wantKeyCooling("after A's Remove", map[string]int{keyA: 2})
	e.allocP(quotaAlloc(keyB, 2, 1, 0)) // a cooling node: nothing is ready
	e.wantKeyCooling("after B took one of them", map[string]int{keyA: 1})
	e.allocP(quotaAlloc(keyA, 3, 1, 2))
	e.wantKeyCooling("after A took the other", map[string]int{})
	e.removeAs(keyB, req(2), time.Time{})
	e.wantKeyCooling("after B's Remove", map[string]int{keyB: 1})
}

// testQuotaResetKeepsCharge: a reset raises every Floor, but the charge of a
// node ends where the Remove left its fenced watermark.
func testQuotaResetKeepsCharge(t *testing.T, open Factory) {
	e := setup(t, open, 2)
	t0 := e.now()
	e.allocP(quotaAlloc(keyA, 1, 1, 1))
	e.renew(req(1), time.Hour)
	e.removeAs(keyA, req(1), time.Time{})
	res, err := e.s.Reset(e.ctx, idkeeper.ResetParams{Seen: e.gen, Pool: poolOf(2), Until: t0.Add(3 * time.Hour)})
	e.must(err, "Reset")
	e.gen = res.Generation
	e.wantKeyCooling("after the reset", map[string]int{keyA: 1})
	e.clock.Set(t0.Add(time.Hour + ms))
	e.wantKeyCooling("past the Remove's watermark, before the reset's floor", map[string]int{})
}

// testQuotaRemoveCycle: Alloc, Renew, Remove without mintedUpTo, again and again,
// stops at the key's quota, and another key still gets node IDs (issue #29).
func testQuotaRemoveCycle(t *testing.T, open Factory) {
	e := setup(t, open, 16)
	const quota = 4
	for i := 1; i <= quota; i++ {
		e.allocP(quotaAlloc(keyA, i, 1, quota))
		e.renew(req(i), 48*time.Hour)
		e.removeAs(keyA, req(i), time.Time{})
	}
	e.wantQuotaRefused(quotaAlloc(keyA, quota+1, 1, quota), quota, quota)
	e.wantKeyCooling("after the cycle", map[string]int{keyA: quota})
	if c := e.counts(); c.Remaining != 16 || c.Cooling != quota {
		t.Fatalf("Counts after the cycle = %+v, want 16 remaining, %d of them cooling", c, quota)
	}
	e.allocP(quotaAlloc(keyB, 100, 16-quota, 0))
	e.check()
}

// testSnapshotDropsCharges: a snapshot does not carry cooling charges and a load
// drops the store's own (LeaseStore.Remove).
func testSnapshotDropsCharges(t *testing.T, open Factory) {
	e := setup(t, open, 4)
	e.allocP(quotaAlloc(keyA, 1, 2, 0))
	e.removeAs(keyA, req(1), time.Time{})
	e.wantKeyCooling("before the snapshot", map[string]int{keyA: 2})
	sn := e.readSnapshot()
	f := setup(t, open, 4)
	f.clock.Set(e.clock.Now())
	f.allocP(quotaAlloc(keyB, 2, 3, 0))
	f.removeAs(keyB, req(2), time.Time{})
	f.wantKeyCooling("before the load", map[string]int{keyB: 3})
	f.load(sn)
	f.wantKeyCooling("after the load", map[string]int{})
	e.wantKeyCooling("the snapshot's source after ReadSnapshot", map[string]int{keyA: 2})
}
