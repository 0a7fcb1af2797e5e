// Package storetest is the one contract suite every idkeeper.Store implementation
// passes. A store's own test file calls Run with a Factory that opens a new, empty
// store on a fake clock:
//
//	func TestStore(t *testing.T) {
//		storetest.Run(t, func(t *testing.T, clock idkeeper.Clock) idkeeper.Store {
//			s, err := mystore.Open(…, clock)
//			if err != nil {
//				t.Fatal(err)
//			}
//			t.Cleanup(func() { s.Close() })
//			return s
//		})
//	}
//
// The suite checks the doc comments of idkeeper.Store, sentence by sentence. Time
// moves only through the fake clock, so no test sleeps; the clock starts half a
// millisecond past a whole millisecond, so a store that does not truncate its clock
// to the millisecond fails. Subtests run one after another, never in parallel, so a
// factory may hand out stores that share one server.
//
// Besides scripted cases, the suite runs seeded random sequences of operations
// (Random) in which every answer is checked against the store's prior state.
//
// A store that can lose all its data in a test (a Redis restart without
// persistence, say) implements Wiper; the suite then also checks the ErrStoreReset
// path on a wiped store. A store that cannot is skipped there.
package storetest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/internal/harness/fakeclock"
	"github.com/idkeeper/idkeeper/protocol"
)

// Factory opens a new, empty store whose clock (time authority) is clock. It
// registers the store's Close with t.Cleanup; the suite never closes it.
type Factory func(t *testing.T, clock idkeeper.Clock) idkeeper.Store

// Wiper is the optional test hook of a Store: WipeForTest deletes all the store's
// data, as a restart without persistence would. Only test builds should have it.
type Wiper interface {
	WipeForTest(ctx context.Context) error
}

// Run runs the whole contract suite as subtests of t.
func Run(t *testing.T, open Factory) {
	for _, c := range append(append(append(cases, historyCases...), poolCases...), quotaCases...) {
		t.Run(c.name, func(t *testing.T) { c.fn(t, open) })
	}
}

// RunRecords runs the cases of the records outside the lease pool: the store's
// clock, Ping, job locks, API keys and clock-skew observations. It is for a store
// whose lease methods are not written yet (the PostgreSQL store, issue #32): the
// Factory's store is asked for nothing else, so its lease methods may panic.
// Run includes these cases.
func RunRecords(t *testing.T, open Factory) {
	for _, c := range cases {
		if recordCase(c.name) {
			t.Run(c.name, func(t *testing.T) { c.fn(t, open) })
		}
	}
}

// recordCase reports whether the case of that name is one of RunRecords'.
func recordCase(name string) bool {
	for _, p := range []string{"Now/", "Ping", "Lock/", "Locks/", "APIKey", "Skew"} {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

type testCase struct {
	name string
	fn   func(t *testing.T, open Factory)
}

var cases = []testCase{
	{"Now/Millisecond", testNow},
	{"Ping", testPing},
	{"Init/NotInitialised", testNotInitialised},
	{"Init/Fresh", testInitFresh},
	{"Init/RandomGeneration", testInitRandomGeneration},
	{"Init/Again", testInitAgain},
	{"Init/Grow", testInitGrow},
	{"Init/ShrinkRefused", testInitShrinkRefused},
	{"Grow/Guarded", testGrowGuarded},
	{"Guard/Generation", testGuardGeneration},
	{"Guard/FenceRegression", testGuardFence},
	{"Guard/Clock", testGuardClock},
	{"Owner/AllocRenewRemove", testOwnership},
	{"Owner/Quota", testQuota},
	{"Owner/KeyHoldings", testKeyHoldings},
	{"Tokens/Ceiling", testTokenCeiling},
	{"Alloc/Grant", testAllocGrant},
	{"Alloc/Exhausted", testAllocExhausted},
	{"Alloc/Idempotent", testAllocIdempotent},
	{"Alloc/IdempotentRevivesExpired", testAllocIdempotentRevives},
	{"Alloc/CountMismatch", testAllocCountMismatch},
	{"Alloc/FencingTokens", testAllocFencingTokens},
	{"Alloc/NotBeforeAndWatermark", testAllocWindow},
	{"Alloc/Order/LeastRecentlyFreed", testOrderLeastRecentlyFreed},
	{"Alloc/Order/ReadyBeforeCooling", testOrderReadyBeforeCooling},
	{"Alloc/Order/CoolingByLowestWatermark", testOrderCoolingByWatermark},
	{"Alloc/Order/CoolingTurnsReady", testOrderCoolingTurnsReady},
	{"Alloc/QuarantinedSkipped", testAllocQuarantinedSkipped},
	{"Renew/Extends", testRenewExtends},
	{"Renew/NeverShortens", testRenewNeverShortens},
	{"Renew/RevivesExpired", testRenewRevivesExpired},
	{"Renew/HoldsNothing", testRenewHoldsNothing},
	{"Remove/CountAndReuse", testRemoveCountAndReuse},
	{"Remove/ZeroMintedUpToKeepsWatermark", testRemoveZeroMintedUpTo},
	{"Remove/MintedUpTo", testRemoveMintedUpTo},
	{"Remove/MintedUpToClampedToExpiry", testRemoveMintedUpToClamped},
	{"Remove/MintedUpToNotBeforeFloor", testRemoveNotBeforeFloor},
	{"Remove/MintedUpToQuarantineFloor", testRemoveQuarantineFloor},
	{"Reclaim/OnlyPastGrace", testReclaimOnlyPastGrace},
	{"Reclaim/GraceZero", testReclaimGraceZero},
	{"Reclaim/RenewedMeanwhileStays", testReclaimRenewedStays},
	{"Reclaim/BackOfFreeOrder", testReclaimBackOfOrder},
	{"Quarantine/NeverLowers", testQuarantineNeverLowers},
	{"Quarantine/FreeNode", testQuarantineFree},
	{"Quarantine/HeldNode", testQuarantineHeld},
	{"Quarantine/OutOfPool", testQuarantineOutOfPool},
	{"Revoke/EndsLease", testRevokeEndsLease},
	{"Revoke/NotFound", testRevokeNotFound},
	{"Revoke/LastLease", testRevokeLastLease},
	{"Revoke/ClaimsIgnored", testRevokeClaimsIgnored},
	{"Revoke/NoAllocBeforeGrace", testRevokeNoAllocBeforeGrace},
	{"Revoke/InGrace", testRevokeInGrace},
	{"Revoke/KeepsHigherState", testRevokeKeepsHigherState},
	{"Revoke/BackOfFreeOrder", testRevokeBackOfFreeOrder},
	{"Revoke/Guarded", testRevokeGuarded},
	{"Revoke/NotInitialised", testRevokeNotInitialised},
	{"Counts/EveryState", testCountsEveryState},
	{"Counts/Cooling", testCountsCooling},
	{"Counts/QuarantineEndsIntoCooling", testCountsQuarantineEnds},
	{"Counts/ResetFloorCools", testCountsResetFloorCools},
	{"Counts/MintedUpToReady", testCountsMintedUpToReady},
	{"Reset/Recovers", testResetRecovers},
	{"Reset/AnotherReplicaRecovered", testResetOtherReplica},
	{"Reset/Grows", testResetGrows},
	{"Reset/AfterWipe", testResetAfterWipe},
	{"Reset/AfterInitAnew", testResetAfterInitAnew},
	{"Reset/FloorApartFromWatermark", testResetFloor},
	{"Claims/Restore", testClaimRestore},
	{"Claims/RestoreWindowAfterOwnWatermark", testClaimRestoreWindow},
	{"Claims/IgnoredWithoutReset", testClaimIgnoredWithoutReset},
	{"Claims/IgnoredWhenKnown", testClaimIgnoredWhenKnown},
	{"Claims/IgnoredWhenDead", testClaimIgnoredWhenDead},
	{"Claims/Contest", testClaimContest},
	{"Claims/SecondReceiptContestsRestored", testClaimSecondReceipt},
	{"Claims/NotOwnedChangesNothing", testClaimNotOwned},
	{"Claims/ImpossibleIgnored", testClaimImpossibleIgnored},
	{"Validate/Arguments", testValidation},
	{"Replicated", testReplicated},
	{"Random", testRandom},
	{"Concurrency/AllocExhaustsExactly", testConcurrentAlloc},
	{"Concurrency/NoSharedNodeID", testConcurrentChurn},
	{"Lock/Exclusive", testLockExclusive},
	{"Lock/AtMostFor", testLockAtMostFor},
	{"Lock/AtLeastFor", testLockAtLeastFor},
	{"Locks/None", testLocksNone},
	{"Locks/Held", testLocksHeld},
	{"Locks/Lapsed", testLocksLapsed},
	{"Locks/AtLeastForAfterUnlock", testLocksAtLeastFor},
	{"APIKey", testAPIKeys},
	{"APIKey/RevokeAndTouch", testAPIKeyRevokeTouch},
	{"APIKey/Admin", testAPIKeyAdmin},
	{"APIKey/Update", testAPIKeyUpdate},
	{"APIKey/UpdateRevoked", testAPIKeyUpdateRevoked},
	{"APIKey/CreatedBy", testAPIKeyCreatedBy},
	{"Skew", testSkew},
}

const ms = time.Millisecond

// start is half a millisecond past a whole one: stores must truncate.
var start = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC).Add(500 * time.Microsecond)

// keyA is the API key the env's helpers act with.
const keyA = "key-a"

// req returns requester i. All requesters share machine ID, PID and start time, as
// two sessions of one process, or containers started from one image in the same
// clock tick, do; only the instance tells them apart. Requester 0 has no instance.
func req(i int) idkeeper.Requester {
	r := idkeeper.Requester{
		MachineID: "host-a/ä pod",
		PID:       1,
		StartedAt: time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC),
	}
	if i > 0 {
		r.Instance = fmt.Sprintf("inst-%d_x", i)
	}
	return r
}

// env is one open store on a fake clock, with the facts a test tracks about it.
type env struct {
	t     *testing.T
	ctx   context.Context
	clock *fakeclock.Clock
	s     idkeeper.Store
	first idkeeper.NodeID     // the pool's first node ID
	nodes int                 // pool size: node IDs first..first+nodes-1
	fence uint64              // highest fencing token seen
	gen   idkeeper.Generation // the generation adopted
	// frees counts the calls that freed node IDs; rank[id] is the count of the
	// call that last freed id, 0 when it was never freed since it was created.
	frees int
	rank  map[idkeeper.NodeID]int
}

// openEnv opens an empty store without initialising it.
func openEnv(t *testing.T, open Factory) *env {
	t.Helper()
	c := fakeclock.New(start)
	return &env{t: t, ctx: t.Context(), clock: c, s: open(t, c.Now), rank: map[idkeeper.NodeID]int{}}
}

// poolOf is the pool of n node IDs from 0 on, on the default layout: the pool of
// every case that is not about First or the layout.
func poolOf(n int) idkeeper.PoolSpec { return idkeeper.PoolSpec{Nodes: n} }

// setup opens a store and initialises a pool of nodes node IDs.
func setup(t *testing.T, open Factory, nodes int) *env {
	t.Helper()
	e := openEnv(t, open)
	res, err := e.s.Init(e.ctx, poolOf(nodes))
	if err != nil {
		t.Fatalf("Init(%d): %v", nodes, err)
	}
	if !res.Fresh || res.Generation.ID == "" {
		t.Fatalf("Init(%d) on an empty store = %+v, want Fresh and a generation", nodes, res)
	}
	e.nodes, e.gen = nodes, res.Generation
	return e
}

// guard is the Guard of the env's calls: the adopted generation, the highest token
// seen, and the store's own clock (the fake clock), which agrees with itself.
func (e *env) guard() idkeeper.Guard {
	return idkeeper.Guard{Generation: e.gen.ID, MinFence: e.fence, Now: e.now()}
}

func (e *env) allocRaw(r idkeeper.Requester, count int, first time.Duration) (idkeeper.Grant, error) {
	return e.s.Alloc(e.ctx, e.guard(), idkeeper.AllocParams{Requester: r, KeyID: keyA, Count: count, First: first})
}

func (e *env) renewRaw(r idkeeper.Requester, d time.Duration) (idkeeper.Grant, error) {
	return e.s.Renew(e.ctx, e.guard(), idkeeper.RenewParams{Requester: r, KeyID: keyA, Duration: d})
}

func (e *env) removeRaw(r idkeeper.Requester, mintedUpTo time.Time) (int, error) {
	return e.s.Remove(e.ctx, e.guard(), idkeeper.RemoveParams{Requester: r, KeyID: keyA, MintedUpTo: mintedUpTo})
}

func (e *env) reclaimRaw(grace time.Duration) (int, error) {
	return e.s.Reclaim(e.ctx, e.guard(), grace)
}

func (e *env) quarantineRaw(until time.Time, nodes ...idkeeper.NodeID) error {
	return e.s.Quarantine(e.ctx, e.guard(), until, nodes...)
}

func (e *env) now() time.Time { return protocol.Millis(e.clock.Now()) }

// advance moves the clock by d and returns the store's new now.
func (e *env) advance(d time.Duration) time.Time {
	e.clock.Advance(d)
	return e.now()
}

func (e *env) must(err error, what string) {
	e.t.Helper()
	if err != nil {
		e.t.Fatalf("%s: %v", what, err)
	}
}

func (e *env) node(id idkeeper.NodeID) idkeeper.NodeState {
	e.t.Helper()
	st, err := e.s.Node(e.ctx, id)
	e.must(err, fmt.Sprintf("Node(%d)", id))
	if st.NodeID != id {
		e.t.Fatalf("Node(%d).NodeID = %d", id, st.NodeID)
	}
	return st
}

func (e *env) status() idkeeper.StoreStatus {
	e.t.Helper()
	st, err := e.s.Status(e.ctx)
	e.must(err, "Status")
	wantTime(e.t, "Status.Now", st.Now, e.now())
	return st
}

func (e *env) counts() idkeeper.Counts {
	e.t.Helper()
	c, err := e.s.Counts(e.ctx)
	e.must(err, "Counts")
	return c
}

func (e *env) leases() []idkeeper.Lease {
	e.t.Helper()
	ls, err := e.s.Leases(e.ctx)
	e.must(err, "Leases")
	return ls
}

// alloc allocates count node IDs to r with keyA, as allocP does.
func (e *env) alloc(r idkeeper.Requester, count int, first time.Duration) idkeeper.Grant {
	e.t.Helper()
	return e.allocP(idkeeper.AllocParams{Requester: r, KeyID: keyA, Count: count, First: first})
}

// allocP allocates p.Count node IDs to p.Requester, which must hold nothing, and
// checks every rule of a new grant, the pick order included, against the node
// states read just before.
func (e *env) allocP(p idkeeper.AllocParams) idkeeper.Grant {
	e.t.Helper()
	r, count, first := p.Requester, p.Count, p.First
	before := make(map[idkeeper.NodeID]idkeeper.NodeState, e.nodes)
	for i := range e.nodes {
		id := e.first + idkeeper.NodeID(i)
		before[id] = e.node(id)
	}
	g, err := e.s.Alloc(e.ctx, e.guard(), p)
	e.must(err, fmt.Sprintf("Alloc(%s, %d)", r, count))
	now := e.now()
	if len(g.Leases) != count {
		e.t.Fatalf("Alloc(%d) granted %d leases", count, len(g.Leases))
	}
	wantTime(e.t, "Grant.Now", g.Now, now)
	if g.Fence != e.fence+uint64(count) {
		e.t.Fatalf("Grant.Fence = %d, want %d (previous fence %d + %d grants)", g.Fence, e.fence+uint64(count), e.fence, count)
	}
	var tokens []uint64
	for i, l := range g.Leases {
		if i > 0 && l.NodeID <= g.Leases[i-1].NodeID {
			e.t.Fatalf("Alloc leases not sorted by NodeID: %v", nodeIDs(g.Leases))
		}
		b, ok := before[l.NodeID]
		switch {
		case !ok:
			e.t.Fatalf("Alloc granted node %d outside the pool %d..%d", l.NodeID, e.first, int(e.first)+e.nodes-1)
		case b.Lease != nil:
			e.t.Fatalf("Alloc granted node %d, held by %s", l.NodeID, b.Lease.Requester)
		case b.QuarantinedUntil.After(now):
			e.t.Fatalf("Alloc granted node %d, quarantined until %s", l.NodeID, b.QuarantinedUntil)
		}
		want := idkeeper.Lease{
			NodeID: l.NodeID, Requester: r, NotBefore: b.Fenced().Add(ms), ExpiresAt: now.Add(first),
			FencingToken: l.FencingToken, GrantedAt: now, KeyID: p.KeyID,
		}
		wantLease(e.t, "granted lease", l, want)
		tokens = append(tokens, l.FencingToken)
		st := e.node(l.NodeID)
		if st.Lease == nil {
			e.t.Fatalf("Node(%d) shows no lease after the grant", l.NodeID)
		}
		wantLease(e.t, "Node().Lease after grant", *st.Lease, l)
		wantTime(e.t, fmt.Sprintf("node %d watermark after grant", l.NodeID), st.Watermark, maxTime(b.Watermark, l.ExpiresAt))
		wantTime(e.t, fmt.Sprintf("node %d floor after grant", l.NodeID), st.Floor, b.Floor)
		if st.LastToken != l.FencingToken || st.Restorable {
			e.t.Fatalf("node %d after grant: LastToken %d, Restorable %v; want %d, false", l.NodeID, st.LastToken, st.Restorable, l.FencingToken)
		}
	}
	e.checkPicks(g, before, now)
	slices.Sort(tokens)
	for i, tok := range tokens {
		if tok != e.fence+uint64(i)+1 {
			e.t.Fatalf("fencing tokens %v, want %d..%d", tokens, e.fence+1, e.fence+uint64(count))
		}
	}
	e.fence = g.Fence
	e.check()
	return g
}

// allocOne allocates one node ID to r and returns it.
func (e *env) allocOne(r idkeeper.Requester, first time.Duration) idkeeper.NodeID {
	e.t.Helper()
	return e.alloc(r, 1, first).Leases[0].NodeID
}

func (e *env) renew(r idkeeper.Requester, d time.Duration) idkeeper.Grant {
	e.t.Helper()
	g, err := e.renewRaw(r, d)
	e.must(err, fmt.Sprintf("Renew(%s)", r))
	wantTime(e.t, "Renew Grant.Now", g.Now, e.now())
	if g.Fence != e.fence {
		e.t.Fatalf("Renew Grant.Fence = %d, want the counter %d", g.Fence, e.fence)
	}
	if len(g.Restored)+len(g.Contested) != 0 {
		e.t.Fatalf("Renew without claims restored %v, contested %v", g.Restored, g.Contested)
	}
	return g
}

func (e *env) remove(r idkeeper.Requester, mintedUpTo time.Time) int {
	e.t.Helper()
	held := e.heldBy(r)
	n, err := e.removeRaw(r, mintedUpTo)
	e.must(err, fmt.Sprintf("Remove(%s)", r))
	if n != len(held) {
		e.t.Fatalf("Remove(%s) = %d, but it held %d", r, n, len(held))
	}
	e.freed(held)
	e.check()
	return n
}

// heldBy returns the leases r holds, from Leases.
func (e *env) heldBy(r idkeeper.Requester) []idkeeper.Lease {
	e.t.Helper()
	var out []idkeeper.Lease
	for _, l := range e.leases() {
		if l.Requester.Key() == r.Key() {
			out = append(out, l)
		}
	}
	return out
}

// freed records that one call freed these leases' node IDs.
func (e *env) freed(ls []idkeeper.Lease) {
	if len(ls) == 0 {
		return
	}
	e.frees++
	for _, l := range ls {
		e.rank[l.NodeID] = e.frees
	}
}

func (e *env) quarantine(until time.Time, nodes ...idkeeper.NodeID) {
	e.t.Helper()
	e.must(e.quarantineRaw(until, nodes...), "Quarantine")
	e.check()
}

func (e *env) reclaim(grace time.Duration) int {
	e.t.Helper()
	before := e.leases()
	wm := map[idkeeper.NodeID]time.Time{}
	for _, l := range before {
		wm[l.NodeID] = e.node(l.NodeID).Watermark
	}
	n, err := e.reclaimRaw(grace)
	e.must(err, "Reclaim")
	now := e.now()
	after := map[idkeeper.NodeID]bool{}
	for _, l := range e.leases() {
		after[l.NodeID] = true
	}
	var gone []idkeeper.Lease
	for _, l := range before {
		due := l.ExpiresAt.Add(grace).Before(now)
		if after[l.NodeID] == due {
			e.t.Fatalf("Reclaim(%s) at %s: lease %s due %v, still there %v", grace, fmtTime(now), fmtLease(l), due, after[l.NodeID])
		}
		if due {
			gone = append(gone, l)
			wantTime(e.t, "watermark after Reclaim", e.node(l.NodeID).Watermark, wm[l.NodeID])
		}
	}
	if n != len(gone) {
		e.t.Fatalf("Reclaim = %d, but %d leases were due", n, len(gone))
	}
	e.freed(gone)
	e.check()
	return n
}
