package idkeeper_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/internal/harness/fakeclock"
	"github.com/idkeeper/idkeeper/internal/harness/storetest"
	"github.com/idkeeper/idkeeper/protocol"
)

// resetEnv is a registry over a storetest.Swap holding a bolt file.
type resetEnv struct {
	*env
	files *boltFiles
	sw    *storetest.Swap
	path  string // the bolt file in place at the start
}

func newResetEnv(t *testing.T, cfg idkeeper.Config) *resetEnv {
	t.Helper()
	clk := fakeclock.New(t0)
	files := newBoltFiles(t, clk)
	st, path := files.open(nil)
	sw := storetest.NewSwap(st)
	return &resetEnv{env: openEnv(t, sw, clk, cfg), files: files, sw: sw, path: path}
}

func (e *resetEnv) alloc(t *testing.T, r idkeeper.Requester, count int) idkeeper.Grant {
	t.Helper()
	g, err := e.reg.Alloc(context.Background(), idkeeper.AllocRequest{Requester: r, Count: count, Key: idkeeper.APIKey{ID: "key-a"}})
	if err != nil {
		t.Fatalf("alloc %s: %v", r, err)
	}
	return g
}

func (e *resetEnv) renew(t *testing.T, r idkeeper.Requester, rcpts []string) idkeeper.Grant {
	t.Helper()
	g, err := e.reg.Renew(context.Background(), idkeeper.RenewRequest{Requester: r, Receipts: rcpts, KeyID: "key-a"})
	if err != nil {
		t.Fatalf("renew %s: %v", r, err)
	}
	return g
}

func wantCode(t *testing.T, err error, code idkeeper.Code) {
	t.Helper()
	if protocol.ErrorCode(err) != code {
		t.Fatalf("err = %v, want %s", err, code)
	}
}

// Issue #8 item 4: a store that lost everything is never initialised as new by a
// registry. One that saw it recovers it (quarantine, raised floors) the moment it
// finds it empty; a registry that never saw it waits for `idkeeper init` and then
// adopts the recovery; a node held before the loss is never granted again with an
// open window.
func TestWipedStoreIsRecoveredNotInitialised(t *testing.T) {
	e := newResetEnv(t, idkeeper.Config{Nodes: 8})
	ctx := context.Background()
	held := e.alloc(t, who(1), 2)
	e.renew(t, who(1), receipts(held))
	before := e.reg.Generation()

	empty, _ := e.files.open(nil) // the volume is lost: an empty file
	e.sw.Put(empty)

	// A registry starting now has never seen the store: it waits and initialises nothing.
	fresh := startEnv(t, e.sw, e.clk, idkeeper.Config{Nodes: 8})
	if p := fresh.reg.Phase(); p != idkeeper.PhaseUninitialised {
		t.Fatalf("a new registry on an empty store is %s, want uninitialised", p)
	}
	_, err := fresh.reg.Alloc(ctx, idkeeper.AllocRequest{Requester: who(9), Count: 1})
	wantCode(t, err, protocol.CodeStoreNotInitialised)
	wantCode(t, fresh.reg.Ready(ctx), protocol.CodeStoreNotInitialised)
	if st, _ := e.sw.Status(ctx); st.Initialised {
		t.Fatalf("a registry initialised the store by itself: %+v", st)
	}

	// The running registry saw generation 1: its next call recovers the store.
	_, err = e.reg.Alloc(ctx, idkeeper.AllocRequest{Requester: who(2), Count: 1})
	wantCode(t, err, protocol.CodeNodeIDsExhausted)
	gen := e.reg.Generation()
	if gen.Origin != idkeeper.OriginRecovered || gen.Number != before.Number+1 || e.obs.resetCount(true) != 1 {
		t.Fatalf("after the wipe: generation %+v (was %+v), resets %v", gen, before, e.obs.resets)
	}
	until := t0.Add(48*time.Hour + 10*time.Minute)
	for id := range 8 {
		ns, err := e.store.Node(ctx, idkeeper.NodeID(id))
		if err != nil || ns.QuarantinedUntil.Before(until) || ns.Floor.Before(until) {
			t.Fatalf("node %d after recovery: %+v %v; want quarantine and floor at %s", id, ns, err, until)
		}
	}
	// The waiting registry adopts the recovered generation at its next check.
	if err := fresh.reg.CheckStore(ctx); err != nil || fresh.reg.Generation() != gen || fresh.reg.Phase() != idkeeper.PhaseReady {
		t.Fatalf("the new registry after recovery: %v, %+v, %s", err, fresh.reg.Generation(), fresh.reg.Phase())
	}
	// Nobody gets the old holder's node IDs with a window they may still mint in.
	e.clk.Set(until.Add(time.Millisecond))
	g := e.alloc(t, who(3), 8)
	for _, l := range g.Leases {
		if !l.NotBefore.After(until) {
			t.Fatalf("node %d granted with NotBefore %s, inside the forgotten holders' windows", l.NodeID, l.NotBefore)
		}
	}
}

// Issue #8 item 4, second half: a store wiped and initialised anew (someone ran
// init on it) holds a generation the running registry never saw: it is a reset,
// whatever its origin, and the held node stays safe.
func TestStoreInitialisedAnewIsAReset(t *testing.T) {
	e := newResetEnv(t, idkeeper.Config{Nodes: 4})
	ctx := context.Background()
	held := e.alloc(t, who(1), 1).Leases[0]
	empty, _ := e.files.open(nil)
	if _, err := empty.Init(ctx, idkeeper.PoolSpec{Nodes: 4}); err != nil {
		t.Fatal(err)
	}
	e.sw.Put(empty)
	if err := e.reg.CheckStore(ctx); err != nil {
		t.Fatal(err)
	}
	if e.obs.resetsTotal() != 1 || e.reg.Generation().Origin != idkeeper.OriginRecovered {
		t.Fatalf("a store initialised anew was not treated as a reset: %v %+v", e.obs.resets, e.reg.Generation())
	}
	_, err := e.reg.Alloc(ctx, idkeeper.AllocRequest{Requester: who(2), Count: 1})
	wantCode(t, err, protocol.CodeNodeIDsExhausted)
	ns, _ := e.store.Node(ctx, held.NodeID)
	if !ns.Fenced().After(held.ExpiresAt) {
		t.Fatalf("node %d's fence %s is not past the old lease's end %s", held.NodeID, ns.Fenced(), held.ExpiresAt)
	}
}

// Issue #8 item 5: a store rolled back by one grant (a failover to a replica that
// missed it, a stale copy) is caught by the next grant, inside the store step: the
// grant that would have repeated the lost token, with a window overlapping the lost
// holder's, is never made nor returned, and a retry does not get it either.
func TestRollbackOfOneGrantIsCaughtBeforeTheNextGrant(t *testing.T) {
	e := newResetEnv(t, idkeeper.Config{Nodes: 1})
	ctx := context.Background()
	g1 := e.alloc(t, who(1), 1).Leases[0]
	if _, err := e.reg.Remove(ctx, idkeeper.RemoveRequest{Requester: who(1), MintedUpTo: t0, KeyID: "key-a"}); err != nil {
		t.Fatal(err)
	}
	older := e.files.copyOf(e.path)
	e.clk.Advance(time.Second)
	lost := e.alloc(t, who(2), 1).Leases[0] // the grant the store will lose
	if lost.FencingToken != g1.FencingToken+1 {
		t.Fatalf("token %d, want %d", lost.FencingToken, g1.FencingToken+1)
	}
	stale, _ := e.files.open(older)
	e.sw.Put(stale)

	for range 2 { // a retry does not get a stale grant either
		_, err := e.reg.Alloc(ctx, idkeeper.AllocRequest{Requester: who(3), Count: 1})
		wantCode(t, err, protocol.CodeNodeIDsExhausted)
	}
	if e.obs.resetCount(true) != 1 {
		t.Fatalf("resets %v, want one recovery", e.obs.resets)
	}
	ns, _ := e.store.Node(ctx, 0)
	if ns.Lease != nil || !ns.Fenced().After(lost.ExpiresAt) {
		t.Fatalf("node 0 after the rollback: %+v; the lost holder's window ends %s", ns, lost.ExpiresAt)
	}
	if st, _ := e.store.Status(ctx); st.Fence < lost.FencingToken {
		t.Fatalf("fencing counter %d below the lost token %d", st.Fence, lost.FencingToken)
	}
	// The lost holder keeps its lease: its receipt restores it, window unchanged.
	g := e.renew(t, who(2), []string{lost.Receipt})
	if len(g.Leases) != 1 || g.Leases[0].FencingToken != lost.FencingToken || !g.Leases[0].NotBefore.Equal(lost.NotBefore) {
		t.Fatalf("the lost holder's renew = %+v, want its lease %+v back", g.Leases, lost)
	}
}

// Issue #8 item 6: what a replica compares the store against survives its restart
// (Config.State): a store rolled back while the registry was down is caught when it
// opens, before any grant.
func TestRollbackWhileTheRegistryRestartsIsCaught(t *testing.T) {
	clk := fakeclock.New(t0)
	files := newBoltFiles(t, clk)
	st, path := files.open(nil)
	state := &idkeeper.MemoryState{} // the replica's state file
	cfg := idkeeper.Config{Nodes: 2, State: state}
	e := openEnv(t, st, clk, cfg)
	ctx := context.Background()
	older := files.copyOf(path)
	lost, err := e.reg.Alloc(ctx, idkeeper.AllocRequest{Requester: who(1), Count: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.reg.Close(); err != nil {
		t.Fatal(err)
	}

	stale, _ := files.open(older)
	again := startEnv(t, stale, clk, cfg)
	if again.obs.resetCount(true) != 1 || again.reg.Phase() != idkeeper.PhaseReady {
		t.Fatalf("a restart onto a rolled-back store: resets %v, phase %s; want a recovery at Open", again.obs.resets, again.reg.Phase())
	}
	if !strings.Contains(again.logs.String(), "fencing counter 0 is below token 1") {
		t.Fatalf("the recovery does not say why:\n%s", again.logs)
	}
	_, err = again.reg.Alloc(ctx, idkeeper.AllocRequest{Requester: who(2), Count: 1})
	wantCode(t, err, protocol.CodeNodeIDsExhausted)
	g, err := again.reg.Renew(ctx, idkeeper.RenewRequest{Requester: who(1), Receipts: receipts(lost)})
	if err != nil || len(g.Leases) != 1 || g.Leases[0].FencingToken != lost.Leases[0].FencingToken {
		t.Fatalf("renew of the lost holder after the restart: %+v %v", g, err)
	}

	// A plain restart over the same store finds nothing.
	if err := again.reg.Close(); err != nil {
		t.Fatal(err)
	}
	third := startEnv(t, stale, clk, cfg)
	if third.obs.resetsTotal() != 0 || third.reg.Phase() != idkeeper.PhaseReady {
		t.Fatalf("a plain restart: resets %v, phase %s", third.obs.resets, third.reg.Phase())
	}
}

// Issue #8 item 9: after a detected reset, holders that show their receipts keep
// their leases (same node, token and window start), so the fleet does not exit;
// node IDs nobody claims stay quarantined; new sessions wait.
func TestReceiptsKeepLiveHoldersOverAReset(t *testing.T) {
	e := newResetEnv(t, idkeeper.Config{Nodes: 6})
	ctx := context.Background()
	var grants []idkeeper.Grant // as the holders last learned them
	for i := 1; i <= 3; i++ {
		g := e.alloc(t, who(i), 2)
		grants = append(grants, e.renew(t, who(i), receipts(g)))
	}
	e.clk.Advance(time.Hour)
	empty, _ := e.files.open(nil)
	e.sw.Put(empty)

	for i, g := range grants[:2] {
		rg := e.renew(t, who(i+1), receipts(g))
		if len(rg.Leases) != 2 {
			t.Fatalf("holder %d after the reset: %+v, want its 2 leases", i+1, rg.Leases)
		}
		for j, l := range rg.Leases {
			was := g.Leases[j]
			if l.NodeID != was.NodeID || l.FencingToken != was.FencingToken || !l.NotBefore.Equal(was.NotBefore) ||
				!l.ExpiresAt.Equal(e.clk.Now().Add(48*time.Hour)) || l.Receipt == "" {
				t.Fatalf("restored lease %+v, want node %d token %d window from %s to now+48h", l, was.NodeID, was.FencingToken, was.NotBefore)
			}
		}
	}
	if e.obs.resetCount(true) != 1 || e.obs.evidenceCount("restored") != 4 {
		t.Fatalf("resets %v, evidence %v", e.obs.resets, e.obs.evidence)
	}
	// A holder that presents nothing learns it holds nothing.
	if g := e.renew(t, who(3), nil); len(g.Leases) != 0 {
		t.Fatalf("renew without receipts after the reset = %v", g.Leases)
	}
	c, _ := e.reg.Remaining(ctx)
	if c.Leased != 4 || c.Quarantined != 2 || c.Remaining != 0 {
		t.Fatalf("pool after restores: %+v; want 4 restored, the 2 unclaimed quarantined", c)
	}
	_, err := e.reg.Alloc(ctx, idkeeper.AllocRequest{Requester: who(7), Count: 1})
	wantCode(t, err, protocol.CodeNodeIDsExhausted)
}

// Issue #8 item 9: two claims on one node ID after a reset stop both holders.
func TestTwoClaimsOnOneNodeStopBoth(t *testing.T) {
	e := newResetEnv(t, idkeeper.Config{Nodes: 1})
	ctx := context.Background()
	first := e.alloc(t, who(1), 1)
	if _, err := e.reg.Remove(ctx, idkeeper.RemoveRequest{Requester: who(1), MintedUpTo: t0, KeyID: "key-a"}); err != nil {
		t.Fatal(err)
	}
	second := e.alloc(t, who(2), 1)
	empty, _ := e.files.open(nil)
	e.sw.Put(empty)
	// The first holder replays the receipt of the lease it released: after the
	// wipe the store cannot tell, and restores it...
	if g := e.renew(t, who(1), receipts(first)); len(g.Leases) != 1 {
		t.Fatalf("first claim: %+v", g.Leases)
	}
	// ...until the real holder claims the node too: neither keeps it.
	if g := e.renew(t, who(2), receipts(second)); len(g.Leases) != 0 {
		t.Fatalf("second claim kept %+v", g.Leases)
	}
	if g := e.renew(t, who(1), nil); len(g.Leases) != 0 {
		t.Fatalf("the first claimant kept %+v", g.Leases)
	}
	ns, _ := e.store.Node(ctx, 0)
	end := second.Leases[0].ExpiresAt
	if ns.Lease != nil || !ns.QuarantinedUntil.After(end.Add(10*time.Minute-time.Millisecond)) {
		t.Fatalf("node after two claims: %+v; want free and quarantined past %s + grace", ns, end)
	}
	if e.obs.evidenceCount("contested") != 1 {
		t.Fatalf("evidence %v", e.obs.evidence)
	}
}

// Issue #8 item 8: only authentic receipts are evidence. A bare fencing token,
// however high, a forged receipt, or one issued to another requester or key,
// quarantines nothing and moves no counter; a token outside 1..2^53−1 is refused.
func TestUnverifiedEvidenceIsIgnored(t *testing.T) {
	e := newEnv(t, idkeeper.Config{Nodes: 16})
	ctx := context.Background()
	g, err := e.reg.Alloc(ctx, idkeeper.AllocRequest{Requester: who(1), Count: 1, Key: idkeeper.APIKey{ID: "key-a"}})
	if err != nil {
		t.Fatal(err)
	}
	real := g.Leases[0].Receipt
	forged := []byte(real)
	forged[10] ^= 1
	for _, req := range []idkeeper.RenewRequest{
		{Requester: who(2), FencingTokens: []uint64{idkeeper.MaxFencingToken}},
		{Requester: who(2), Receipts: []string{string(forged)}},
		{Requester: who(2), Receipts: []string{real}},                                     // another requester's
		{Requester: who(1), Receipts: []string{real}, KeyID: "key-b"},                     // another key's: not owned
		{Requester: who(2), Receipts: []string{"not a receipt", strings.Repeat("A", 60)}}, // garbage
	} {
		_, err := e.reg.Renew(ctx, req)
		if err != nil && protocol.ErrorCode(err) != protocol.CodeLeaseNotOwned {
			t.Fatalf("renew %+v: %v", req, err)
		}
	}
	if e.obs.resetsTotal() != 0 {
		t.Fatalf("unverified evidence caused resets %v", e.obs.resets)
	}
	if c, _ := e.reg.Remaining(ctx); c.Quarantined != 0 || c.Remaining != 15 {
		t.Fatalf("pool after unverified evidence: %+v", c)
	}
	if st, _ := e.store.Status(ctx); st.Fence != 1 {
		t.Fatalf("fencing counter moved to %d", st.Fence)
	}
	if e.obs.evidenceCount("bare_token") != 1 || e.obs.evidenceCount("bad_receipt") != 5 {
		t.Fatalf("evidence counted %v", e.obs.evidence)
	}
	for _, tok := range []uint64{0, idkeeper.MaxFencingToken + 1, 1<<64 - 1} {
		_, err := e.reg.Renew(ctx, idkeeper.RenewRequest{Requester: who(2), FencingTokens: []uint64{tok}})
		wantCode(t, err, protocol.CodeInvalidRequest)
	}
}

// Issue #8 item 3: a lease belongs to the key that allocated it. Another key's
// Renew and Remove change nothing, and its mintedUpTo cannot lower the watermark.
func TestAnotherKeyCannotRenewOrRemove(t *testing.T) {
	e := newEnv(t, idkeeper.Config{Nodes: 4})
	ctx := context.Background()
	g, err := e.reg.Alloc(ctx, idkeeper.AllocRequest{Requester: who(1), Count: 1, Key: idkeeper.APIKey{ID: "victim"}})
	if err != nil {
		t.Fatal(err)
	}
	e.reg.Renew(ctx, idkeeper.RenewRequest{Requester: who(1), KeyID: "victim"})
	before, _ := e.store.Node(ctx, g.Leases[0].NodeID)
	_, err = e.reg.Remove(ctx, idkeeper.RemoveRequest{Requester: who(1), MintedUpTo: idkeeper.DefaultLayout.Epoch, KeyID: "attacker"})
	wantCode(t, err, protocol.CodeLeaseNotOwned)
	_, err = e.reg.Renew(ctx, idkeeper.RenewRequest{Requester: who(1), KeyID: "attacker"})
	wantCode(t, err, protocol.CodeLeaseNotOwned)
	_, err = e.reg.Alloc(ctx, idkeeper.AllocRequest{Requester: who(1), Count: 1, Key: idkeeper.APIKey{ID: "attacker"}})
	wantCode(t, err, protocol.CodeLeaseNotOwned)
	after, _ := e.store.Node(ctx, g.Leases[0].NodeID)
	if after.Lease == nil || !after.Watermark.Equal(before.Watermark) || !after.Lease.ExpiresAt.Equal(before.Lease.ExpiresAt) {
		t.Fatalf("another key's calls changed the node: %+v, was %+v", after, before)
	}
	if n, err := e.reg.Remove(ctx, idkeeper.RemoveRequest{Requester: who(1), MintedUpTo: t0, KeyID: "victim"}); err != nil || n != 1 {
		t.Fatalf("the owner's Remove: %d %v", n, err)
	}
}

// Issue #8 item 10: a store clock that jumps away from the registry's stops
// grants, renewals and reclaims (not ready) before a single expiry is set ahead,
// and serving resumes once the clocks agree again.
func TestStoreClockJumpStopsGranting(t *testing.T) {
	storeClk := fakeclock.New(t0)
	files := newBoltFiles(t, storeClk)
	st, _ := files.open(nil)
	own := fakeclock.New(t0)
	e := openEnv(t, st, own, idkeeper.Config{Nodes: 4})
	ctx := context.Background()
	g, err := e.reg.Alloc(ctx, idkeeper.AllocRequest{Requester: who(1), Count: 1})
	if err != nil {
		t.Fatal(err)
	}
	storeClk.Advance(time.Hour) // the store's clock jumps
	_, err = e.reg.Alloc(ctx, idkeeper.AllocRequest{Requester: who(2), Count: 1})
	wantCode(t, err, protocol.CodeStoreClockSkew)
	_, err = e.reg.Renew(ctx, idkeeper.RenewRequest{Requester: who(1)})
	wantCode(t, err, protocol.CodeStoreClockSkew)
	if _, _, err := e.reg.Cleanup(ctx); protocol.ErrorCode(err) != protocol.CodeStoreClockSkew {
		t.Fatalf("cleanup with the clocks apart: %v", err)
	}
	wantCode(t, e.reg.Ready(ctx), protocol.CodeStoreClockSkew)
	ns, _ := st.Node(ctx, g.Leases[0].NodeID)
	if !ns.Lease.ExpiresAt.Equal(g.Leases[0].ExpiresAt) || !ns.Watermark.Equal(g.Leases[0].ExpiresAt) {
		t.Fatalf("an expiry moved with the jumped clock: %+v", ns)
	}
	storeClk.Set(t0.Add(time.Second))
	own.Set(t0.Add(time.Second))
	if err := e.reg.CheckStore(ctx); err != nil {
		t.Fatal(err)
	}
	if err := e.reg.Ready(ctx); err != nil {
		t.Fatalf("ready after the clocks agree: %v", err)
	}
	if _, err := e.reg.Alloc(ctx, idkeeper.AllocRequest{Requester: who(2), Count: 1}); err != nil {
		t.Fatalf("alloc after the clocks agree: %v", err)
	}
}

// Issue #8 item 12: right after the store lost its data, a valid key is never
// answered 401 because the registry cannot read it yet: the lookup finds the store
// reset, recovers it (storing the bootstrap key again), and answers for the key.
func TestKeyLookupOnAWipedStoreRecoversFirst(t *testing.T) {
	const bootstrap = "idk_bootstrap-0123456789abcdefghijkl"
	clk := fakeclock.New(t0)
	files := newBoltFiles(t, clk)
	st, _ := files.open(nil)
	sw := storetest.NewSwap(st)
	var reg *idkeeper.Registry
	e := openEnv(t, sw, clk, idkeeper.Config{Nodes: 4, OnAdopt: func(ctx context.Context) error {
		if reg == nil { // Open adopting the first generation: stored below
			return nil
		}
		_, _, err := reg.EnsureBootstrapKey(ctx, bootstrap)
		return err
	}})
	reg = e.reg
	ctx := context.Background()
	if _, _, err := e.reg.EnsureBootstrapKey(ctx, bootstrap); err != nil {
		t.Fatal(err)
	}
	other, k := idkeeper.NewAPIKey("made with apikey create", t0, time.Time{})
	if err := e.store.CreateAPIKey(ctx, k); err != nil {
		t.Fatal(err)
	}
	empty, _ := files.open(nil)
	sw.Put(empty)

	if _, err := e.reg.Authenticate(ctx, bootstrap); err != nil {
		t.Fatalf("the bootstrap key right after the wipe: %v", err)
	}
	if e.obs.resetCount(true) != 1 {
		t.Fatalf("the lookup did not recover the store: %v", e.obs.resets)
	}
	// A key that lived only in the lost data is gone for good, and says so.
	_, err := e.reg.Authenticate(ctx, other)
	wantCode(t, err, protocol.CodeAPIKeyInvalid)
}

// While the registry recovers it answers STORE_RECOVERING with a Retry-After, and
// STORE_NOT_INITIALISED while it waits for init: never a 401 or a grant.
func TestServingAnswersWhileNotReady(t *testing.T) {
	clk := fakeclock.New(t0)
	files := newBoltFiles(t, clk)
	st, _ := files.open(nil)
	e := startEnv(t, st, clk, idkeeper.Config{Nodes: 4})
	err := e.reg.Serving()
	var ie *idkeeper.Error
	if !errors.As(err, &ie) || ie.Code != protocol.CodeStoreNotInitialised || !strings.Contains(ie.Message, "idkeeper init") {
		t.Fatalf("Serving before init = %v", err)
	}
	if _, err := st.Init(context.Background(), idkeeper.PoolSpec{Nodes: 4}); err != nil {
		t.Fatal(err)
	}
	if err := e.reg.CheckStore(context.Background()); err != nil || e.reg.Serving() != nil {
		t.Fatalf("after init: %v, serving %v", err, e.reg.Serving())
	}
	if e.obs.resetsTotal() != 0 {
		t.Fatalf("init counted as a reset: %v", e.obs.resets)
	}
}

// Issue #8 items 1 and 2: requesters equal in machine ID, PID and start time but
// with their own instances are different requesters: each gets its own node ID and
// token, never the other's lease through the idempotent Alloc.
func TestEqualProcessIdentitiesWithOwnInstancesShareNothing(t *testing.T) {
	e := newEnv(t, idkeeper.Config{Nodes: 4})
	ctx := context.Background()
	a, b := who(1), who(1)
	a.Instance, b.Instance = protocol.NewInstance(), protocol.NewInstance()
	if a.Instance == b.Instance || len(a.Instance) != 22 {
		t.Fatalf("instances %q %q", a.Instance, b.Instance)
	}
	ga, err := e.reg.Alloc(ctx, idkeeper.AllocRequest{Requester: a, Count: 1})
	if err != nil {
		t.Fatal(err)
	}
	gb, err := e.reg.Alloc(ctx, idkeeper.AllocRequest{Requester: b, Count: 1})
	if err != nil {
		t.Fatal(err)
	}
	if ga.Leases[0].NodeID == gb.Leases[0].NodeID || ga.Leases[0].FencingToken == gb.Leases[0].FencingToken {
		t.Fatalf("two instances share a lease: %+v and %+v", ga.Leases[0], gb.Leases[0])
	}
	// One session's Remove, however late, never touches the other's lease.
	if n, err := e.reg.Remove(ctx, idkeeper.RemoveRequest{Requester: a, MintedUpTo: idkeeper.DefaultLayout.Epoch}); err != nil || n != 1 {
		t.Fatalf("remove a: %d %v", n, err)
	}
	if g, _ := e.reg.Renew(ctx, idkeeper.RenewRequest{Requester: b}); len(g.Leases) != 1 {
		t.Fatalf("b lost its lease to a's Remove: %+v", g.Leases)
	}
}
