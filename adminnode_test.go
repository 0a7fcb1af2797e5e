package idkeeper_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/internal/harness/storetest"
	"github.com/idkeeper/idkeeper/protocol"
)

// Node shows one node ID's state through its life: free, leased, in grace,
// quarantined by a revocation, cooling after it; NOT_FOUND outside the pool.
func TestNode(t *testing.T) {
	e := newEnv(t, idkeeper.Config{Nodes: 4})
	ctx := context.Background()
	st, err := e.reg.Node(ctx, 2)
	if err != nil || st.NodeID != 2 || st.Lease != nil || st.LastToken != 0 || st.StatusAt(e.clk.Now()) != idkeeper.NodeFree {
		t.Fatalf("Node(2) of a new pool = %+v, %v", st, err)
	}
	for _, id := range []idkeeper.NodeID{4, 1000, -1} {
		if _, err := e.reg.Node(ctx, id); protocol.ErrorCode(err) != protocol.CodeNotFound || !strings.Contains(err.Error(), "pool of 4") {
			t.Errorf("Node(%d) = %v, want NOT_FOUND naming the pool", id, err)
		}
	}
	g, err := e.reg.Alloc(ctx, idkeeper.AllocRequest{Requester: who(1), Count: 1, Key: idkeeper.APIKey{ID: "key-a"}})
	if err != nil {
		t.Fatal(err)
	}
	l := g.Leases[0]
	st, err = e.reg.Node(ctx, l.NodeID)
	switch {
	case err != nil:
		t.Fatal(err)
	case st.Lease == nil || st.Lease.FencingToken != l.FencingToken || st.LastToken != l.FencingToken:
		t.Fatalf("Node of a leased node ID = %+v, want the lease of token %d", st, l.FencingToken)
	case !st.Watermark.Equal(l.ExpiresAt) || st.StatusAt(e.clk.Now()) != idkeeper.NodeLeased:
		t.Fatalf("Node of a leased node ID: watermark %s, status %s", st.Watermark, st.StatusAt(e.clk.Now()))
	case st.StatusAt(l.ExpiresAt.Add(time.Millisecond)) != idkeeper.NodeGrace:
		t.Fatalf("past its expiry the node is %s, want grace", st.StatusAt(l.ExpiresAt.Add(time.Millisecond)))
	}
	if _, err := e.reg.RevokeLease(ctx, l.NodeID, l.FencingToken); err != nil {
		t.Fatal(err)
	}
	st, err = e.reg.Node(ctx, l.NodeID)
	until := l.ExpiresAt.Add(e.reg.Config().Grace)
	if err != nil || st.Lease != nil || !st.QuarantinedUntil.Equal(until) || st.StatusAt(e.clk.Now()) != idkeeper.NodeQuarantined {
		t.Fatalf("Node after a revocation = %+v, %v; want quarantined until %s", st, err, until)
	}
	if s := st.StatusAt(until); s != idkeeper.NodeCooling && s != idkeeper.NodeFree {
		t.Fatalf("at the quarantine's end the node is %s", s)
	}
	if s := (idkeeper.NodeState{Watermark: until}).StatusAt(until); s != idkeeper.NodeCooling {
		t.Fatalf("a node whose watermark is now is %s, want cooling", s)
	}
}

// After a reset this replica recovered, StoreHealth tells when, why and until when;
// Quarantined groups the node IDs by the end of their quarantine, leaving out the
// ones a receipt restored.
func TestRecoveredResetAndQuarantined(t *testing.T) {
	e := newResetEnv(t, idkeeper.Config{Nodes: 8})
	ctx := context.Background()
	if h := e.reg.StoreHealth(ctx); h.Recovered != nil {
		t.Fatalf("before any reset: Recovered %+v", h.Recovered)
	}
	if gs, _, err := e.reg.Quarantined(ctx); err != nil || len(gs) != 0 {
		t.Fatalf("Quarantined of a new pool = %v, %v", gs, err)
	}
	held := e.alloc(t, who(1), 2)
	e.renew(t, who(1), receipts(held))
	empty, _ := e.files.open(nil)
	e.sw.Put(empty)
	if err := e.reg.CheckStore(ctx); err != nil {
		t.Fatal(err)
	}
	h := e.reg.StoreHealth(ctx)
	until := t0.Add(e.reg.Config().LeaseDuration + e.reg.Config().Grace)
	switch rr := h.Recovered; {
	case rr == nil:
		t.Fatal("StoreHealth.Recovered is nil after a recovery")
	case !rr.At.Equal(t0) || !rr.Until.Equal(until) || !strings.Contains(rr.Why, "empty") || rr.Generation != e.reg.Generation():
		t.Fatalf("Recovered = %+v, want at %s until %s, why the store is empty, generation %+v", rr, t0, until, e.reg.Generation())
	}
	gs, now, err := e.reg.Quarantined(ctx)
	if err != nil || len(gs) != 1 || gs[0].Ranges() != "0-7" || !gs[0].Until.Equal(until) || !now.Equal(t0) {
		t.Fatalf("Quarantined after the reset = %+v at %s, %v; want 0-7 until %s", gs, now, err, until)
	}
	// The holder shows its receipts a minute later: its node IDs leave the
	// quarantine, their leases a minute longer than the reset's quarantine.
	e.clk.Advance(time.Minute)
	g := e.renew(t, who(1), receipts(held))
	if len(g.Restored) != 2 {
		t.Fatalf("restored %v", g.Restored)
	}
	gs, _, err = e.reg.Quarantined(ctx)
	if err != nil || len(gs) != 1 || len(gs[0].Nodes) != 6 {
		t.Fatalf("Quarantined after the restore = %+v, %v", gs, err)
	}
	for _, id := range g.Restored {
		if strings.Contains(","+gs[0].Ranges()+",", ","+strconv.Itoa(int(id))+",") {
			t.Fatalf("restored node %d still listed: %s", id, gs[0].Ranges())
		}
	}
	// A revocation quarantines until another time: a group of its own, sorted.
	if _, err := e.reg.RevokeLease(ctx, g.Leases[0].NodeID, g.Leases[0].FencingToken); err != nil {
		t.Fatal(err)
	}
	gs, _, err = e.reg.Quarantined(ctx)
	if err != nil || len(gs) != 2 || !gs[0].Until.Before(gs[1].Until) || gs[0].Ranges()+gs[1].Ranges() == "" {
		t.Fatalf("Quarantined with a revocation = %+v, %v", gs, err)
	}
}

// JobRuns keeps the last run of each job on this replica: skipped while another
// owner holds the lock (naming it), ran after, an error when the store fails;
// JobLocks and StoreHealth show the locks held.
func TestJobRunsAndLocks(t *testing.T) {
	e := newEnv(t, idkeeper.Config{Nodes: 4})
	ctx := context.Background()
	if runs := e.reg.JobRuns(); len(runs) != 0 {
		t.Fatalf("JobRuns before any run = %+v", runs)
	}
	if ls, err := e.reg.JobLocks(ctx); err != nil || len(ls) != 0 {
		t.Fatalf("JobLocks before any run = %+v, %v", ls, err)
	}
	if _, ok, err := e.store.TryLock(ctx, idkeeper.CleanupJob, "replica-b", time.Minute); err != nil || !ok {
		t.Fatal(ok, err)
	}
	if _, ran, err := e.reg.Cleanup(ctx); ran || err != nil {
		t.Fatalf("Cleanup under another's lock: ran %v, %v", ran, err)
	}
	runs := e.reg.JobRuns()
	if len(runs) != 1 || runs[0].Job != idkeeper.CleanupJob || runs[0].Outcome != idkeeper.JobSkipped ||
		!strings.Contains(runs[0].Detail, "replica-b") || !runs[0].Started.Equal(t0) || !runs[0].Finished.Equal(t0) {
		t.Fatalf("JobRuns after a skipped cleanup = %+v", runs)
	}
	e.clk.Advance(time.Minute)
	if _, ran, err := e.reg.Cleanup(ctx); !ran || err != nil {
		t.Fatalf("Cleanup after the lock lapsed: ran %v, %v", ran, err)
	}
	if _, err := e.reg.WarnExpiringKeys(ctx); err != nil {
		t.Fatal(err)
	}
	runs = e.reg.JobRuns()
	if len(runs) != 2 || runs[0].Job != idkeeper.KeyExpiryJob || runs[1].Job != idkeeper.CleanupJob ||
		runs[0].Outcome != idkeeper.JobRan || runs[0].Detail != "warned about 0 keys" ||
		runs[1].Outcome != idkeeper.JobRan || runs[1].Detail != "reclaimed 0 leases" {
		t.Fatalf("JobRuns = %+v", runs)
	}
	// The cleanup lock stays for its lock-at-least-for after the run.
	h := e.reg.StoreHealth(ctx)
	if h.LocksErr != nil || len(h.Locks) != 1 || h.Locks[0].Name != idkeeper.CleanupJob || h.Locks[0].Owner != e.reg.Config().Owner ||
		len(h.Runs) != 2 {
		t.Fatalf("StoreHealth: locks %+v (%v), runs %+v", h.Locks, h.LocksErr, h.Runs)
	}

	// A store that fails: the run is an error, and the locks cannot be read.
	sw := storetest.NewSwap(e.store)
	f := startEnv(t, sw, e.clk, idkeeper.Config{Nodes: 4})
	closed, _ := newBoltFiles(t, e.clk).open(nil)
	if err := closed.Close(); err != nil {
		t.Fatal(err)
	}
	sw.Put(closed)
	if _, _, err := f.reg.Cleanup(ctx); err == nil {
		t.Fatal("Cleanup on a closed store: no error")
	}
	runs = f.reg.JobRuns()
	if len(runs) != 1 || runs[0].Outcome != idkeeper.JobFailed || runs[0].Detail == "" {
		t.Fatalf("JobRuns after a failed cleanup = %+v", runs)
	}
	if h := f.reg.StoreHealth(ctx); h.LocksErr == nil || protocol.ErrorCode(h.LocksErr) != protocol.CodeStoreUnavailable {
		t.Fatalf("StoreHealth of a closed store: LocksErr %v", h.LocksErr)
	}
}
