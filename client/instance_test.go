package client_test

import (
	"context"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/bolt"
	"github.com/idkeeper/idkeeper/client"
	"github.com/idkeeper/idkeeper/client/clienttest"
	"github.com/idkeeper/idkeeper/internal/harness/storetest"
)

// Issue #8 item 1: a second session of one process never reuses the first one's
// lease, even when the first ended while the server still held it (its Remove
// failed), and a late Remove of the first session never touches the second's lease.
func TestSecondSessionOfAProcessGetsItsOwnLease(t *testing.T) {
	e := newEnv(t, idkeeper.Config{Nodes: 4})
	cfg := e.config() // both sessions: the same machine ID, PID and start time
	first := e.open(cfg)
	firstLease := first.Leases()[0]
	ids1 := mint(t, first, 10)

	// The first session's Remove fails: the server keeps its lease.
	e.proxy.set(removePath, status(http.StatusServiceUnavailable, "STORE_UNAVAILABLE"))
	if err := first.Close(); err == nil {
		t.Fatal("Close with a failing Remove reported success")
	}
	e.proxy.set(removePath, nil)
	if n := len(e.storeLeases()); n != 1 {
		t.Fatalf("the server holds %d leases, want the first session's", n)
	}

	second := e.open(cfg)
	l := second.Leases()[0]
	if second.Requester().Key() == first.Requester().Key() {
		t.Fatalf("two sessions share the requester %s", first.Requester())
	}
	if l.NodeID == firstLease.NodeID || l.FencingToken == firstLease.FencingToken {
		t.Fatalf("the second session got the first one's lease: %+v, first %+v", l, firstLease)
	}
	e.clk.StepWall(-40 * time.Millisecond) // a wall clock step back, as in the report
	ids2 := mint(t, second, 10)
	seen := map[int64]bool{}
	for _, id := range append(ids1, ids2...) {
		if seen[id] {
			t.Fatalf("ID %d minted twice", id)
		}
		seen[id] = true
	}

	// The first session's Remove, delayed past its timeout, lands now.
	if n, err := e.reg.Remove(context.Background(), idkeeper.RemoveRequest{Requester: first.Requester(), KeyID: testKeyID,
		MintedUpTo: idkeeper.DefaultLayout.Epoch}); err != nil || n != 1 {
		t.Fatalf("the late Remove: %d %v", n, err)
	}
	held := e.storeLeases()
	if len(held) != 1 || int64(held[0].NodeID) != l.NodeID || held[0].Requester.Key() != second.Requester().Key() {
		t.Fatalf("after the late Remove the server holds %+v, want the second session's lease", held)
	}
	e.clk.Advance(24 * time.Hour) // the second session renews: it still holds its lease
	e.expectNoFatal()
	if _, err := second.NextID(); err != nil {
		t.Fatal(err)
	}
}

// Issue #8 item 2: sessions with equal machine ID, PID and start time (two pods of
// one image started in the same clock tick, all PID 1) are told apart by their
// instances: each gets its own node IDs, never the other's through the idempotent
// Alloc.
func TestTwinProcessesGetTheirOwnNodeIDs(t *testing.T) {
	e := newEnv(t, idkeeper.Config{Nodes: 8})
	twin := idkeeper.Requester{MachineID: "baked-into-the-image", PID: 1, StartedAt: t0.Add(-10 * time.Millisecond)}
	var sessions []*client.Session
	nodes := map[int64]string{}
	for range 3 {
		cfg := e.config()
		cfg.Requester, cfg.Count = twin, 2
		s := e.open(cfg)
		sessions = append(sessions, s)
		for _, l := range s.Leases() {
			if other, dup := nodes[l.NodeID]; dup {
				t.Fatalf("node %d granted to %s and %s", l.NodeID, other, s.Requester())
			}
			nodes[l.NodeID] = s.Requester().Key()
		}
	}
	for _, s := range sessions {
		if s.Requester().MachineID != twin.MachineID || s.Requester().PID != 1 || s.Requester().Instance == "" {
			t.Fatalf("session requester %+v", s.Requester())
		}
	}
	if c, _ := e.reg.Remaining(context.Background()); c.Leased != 6 {
		t.Fatalf("leased %d, want 6", c.Leased)
	}
}

// Issue #8 item 9, end to end: a store that loses everything while sessions hold
// leases does not end them. Their next Renew carries their receipts; the registry
// detects the reset, recovers the store and restores their leases (node, token and
// window unchanged), and they mint on. A session started after the reset waits.
func TestSessionsSurviveAStoreReset(t *testing.T) {
	clk := clienttest.NewClock(t0)
	newFile := func() idkeeper.Store {
		st, err := bolt.Open(filepath.Join(t.TempDir(), "idk.db"), bolt.Options{Clock: func() time.Time { return t0.Add(clk.Mono()) }})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return st
	}
	sw := storetest.NewSwap(newFile())
	e := newEnvOn(t, idkeeper.Config{Nodes: 4}, sw)
	e.clk = clk
	a, b := e.open(e.config()), e.open(e.config())
	before := [][]client.Lease{a.Leases(), b.Leases()}
	idsBefore := append(mint(t, a, 5), mint(t, b, 5)...)

	empty := newFile()
	if _, err := empty.Init(context.Background(), idkeeper.PoolSpec{Nodes: 4}); err != nil { // someone even ran init on it
		t.Fatal(err)
	}
	sw.Put(empty)
	e.clk.Advance(halfWay) // both renew
	e.expectNoFatal()
	for i, s := range []*client.Session{a, b} {
		after := s.Leases()
		if len(after) != 1 || after[0].NodeID != before[i][0].NodeID || after[0].FencingToken != before[i][0].FencingToken ||
			!after[0].NotBefore.Equal(before[i][0].NotBefore) {
			t.Fatalf("session %d after the reset holds %+v, had %+v", i, after, before[i])
		}
	}
	seen := map[int64]bool{}
	for _, id := range append(idsBefore, append(mint(t, a, 5), mint(t, b, 5)...)...) {
		if seen[id] {
			t.Fatalf("ID %d minted twice", id)
		}
		seen[id] = true
	}
	if c, _ := e.reg.Remaining(context.Background()); c.Leased != 2 || c.Quarantined != 2 {
		t.Fatalf("pool after the reset: %+v; want the 2 restored leases and the rest quarantined\n%s", c, e.logs)
	}
	s, _ := client.New(e.config())
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := s.Open(ctx); err == nil {
		t.Fatal("a new session got a node ID from the quarantined pool")
	}
}
