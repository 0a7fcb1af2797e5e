package client_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/client"
	"github.com/idkeeper/idkeeper/client/clienttest"
	"github.com/idkeeper/idkeeper/snowflake"
)

// mint takes n IDs from s, failing the test on an error.
func mint(t *testing.T, s *client.Session, n int) []int64 {
	t.Helper()
	ids := make([]int64, n)
	if err := s.NextIDs(ids); err != nil {
		t.Fatal(err)
	}
	return ids
}

// Two sessions forced onto the same node ID at overlapping real times still mint
// disjoint IDs (DESIGN §3, timestamp window). A holds node 0 of a one-node pool and
// is frozen (a paused VM: its monotonic clock stops, so it still believes in its
// lease); the server reclaims the node after expiry + grace and grants it to B, whose
// window starts after A's last expiry. When A thaws it mints again: with its stale
// wall clock inside its own old window, and once NTP corrects the clock, not at all.
func TestTwoHoldersOfOneNodeMintDisjointIDs(t *testing.T) {
	const leaseLen = time.Hour
	e := newEnv(t, idkeeper.Config{Nodes: 1, LeaseDuration: leaseLen})
	layout := idkeeper.DefaultLayout

	clockA := clienttest.NewClock(t0) // A's own clock: it stops while A is frozen
	cfgA := e.config()
	cfgA.Clock = clockA
	a := e.open(cfgA)
	endA := a.Leases()[0].ExpiresAt
	if a.Leases()[0].NodeID != 0 || !endA.Equal(t0.Add(leaseLen)) {
		t.Fatalf("A holds %+v", a.Leases())
	}
	idsA := mint(t, a, 100)

	// A is frozen. The world goes on past A's expiry and grace; cleanup reclaims.
	e.clk.Advance(leaseLen + idkeeper.DefaultGrace + time.Second)
	if n, _, err := e.reg.Cleanup(context.Background()); err != nil || n != 1 {
		t.Fatalf("cleanup reclaimed %d, %v; want A's lease", n, err)
	}
	b := e.open(e.config())
	lb := b.Leases()[0]
	if lb.NodeID != 0 || !lb.NotBefore.Equal(endA.Add(time.Millisecond)) {
		t.Fatalf("B holds %+v, want node 0 from A's expiry + 1 ms", lb)
	}
	if lb.FencingToken <= a.Leases()[0].FencingToken {
		t.Errorf("B's fencing token %d does not exceed A's %d", lb.FencingToken, a.Leases()[0].FencingToken)
	}
	idsB := mint(t, b, 100)

	// A thaws. Its monotonic clock says its lease has 59 minutes to go.
	if a.TimeLeft() <= 0 {
		t.Fatal("A's lease looks expired; the freeze did not take")
	}
	clockA.Advance(time.Millisecond)
	idsA = append(idsA, mint(t, a, 100)...) // stale wall clock: inside A's old window

	// NTP steps A's wall clock to the real time, B's time: A may not mint there.
	clockA.StepWall(e.clk.Now().Sub(clockA.Now()))
	if !clockA.Now().Equal(e.clk.Now()) {
		t.Fatal("clocks differ")
	}
	if _, err := a.NextID(); !errors.Is(err, snowflake.ErrWindowEnded) {
		t.Fatalf("A at B's time: %v, want ErrWindowEnded", err)
	}
	if a.Healthy() {
		t.Error("A healthy while it cannot mint")
	}
	idsB = append(idsB, mint(t, b, 100)...)

	all := slices.Concat(idsA, idsB)
	slices.Sort(all)
	if len(slices.Compact(slices.Clone(all))) != len(all) {
		t.Fatal("A and B minted the same ID")
	}
	for _, id := range idsA {
		if p, _ := layout.Decode(id); p.Node != 0 || p.Time.After(endA) {
			t.Fatalf("A minted %+v outside its window", p)
		}
	}
	for _, id := range idsB {
		if p, _ := layout.Decode(id); p.Node != 0 || p.Time.Before(lb.NotBefore) {
			t.Fatalf("B minted %+v outside its window", p)
		}
	}

	// A's next renew learns that it holds nothing.
	clockA.Advance(leaseLen / 2)
	if err := e.expectFatal(); !errors.Is(err, client.ErrLeaseLost) {
		t.Fatalf("A's fatal: %v", err)
	}
	e.expectNoFatal() // B is fine
	if _, err := b.NextID(); err != nil {
		t.Fatal(err)
	}
}

// A holder whose lease was removed behind its back keeps minting until it learns;
// the node's next holder is held back by its window until the old holder's expiry
// has passed, and is unhealthy meanwhile.
func TestNextHolderWaitsForItsWindow(t *testing.T) {
	const leaseLen = time.Hour
	e := newEnv(t, idkeeper.Config{Nodes: 1, LeaseDuration: leaseLen})
	cfgA := e.config()
	a := e.open(cfgA)
	e.removeBehindBack(a) // no mintedUpTo: the watermark stays at A's expiry
	b := e.open(e.config())
	nb := b.Leases()[0].NotBefore
	if !nb.Equal(t0.Add(leaseLen + time.Millisecond)) {
		t.Fatalf("B's window starts at %v, want A's expiry + 1 ms", nb)
	}
	if _, err := b.NextID(); !errors.Is(err, snowflake.ErrBeforeWindow) {
		t.Fatalf("B before its window: %v, want ErrBeforeWindow", err)
	}
	if err := b.Check(); !errors.Is(err, snowflake.ErrBeforeWindow) {
		t.Fatalf("B's Check = %v, want ErrBeforeWindow", err)
	}
	idsA := mint(t, a, 10) // A does not know yet

	e.clk.Advance(leaseLen / 2) // A's renew: empty list; B's renew extends B
	if err := e.expectFatal(); !errors.Is(err, client.ErrLeaseLost) {
		t.Fatalf("A: %v", err)
	}
	e.clk.Advance(leaseLen/2 + time.Millisecond)
	if !b.Healthy() {
		t.Fatalf("B at its window's start: %v", b.Check())
	}
	idsB := mint(t, b, 10)
	for _, id := range idsB {
		if slices.Contains(idsA, id) {
			t.Fatal("duplicate")
		}
	}
}
