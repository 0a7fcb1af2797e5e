package client_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/client"
	"github.com/idkeeper/idkeeper/snowflake"
)

// A session granted a cooling node ID (its previous holder crashed: no Remove with
// mintedUpTo) logs once per lease when it may mint, and Check (the health check)
// says until when the generator waits (issue #20).
func TestCoolingNodeIDIsLoggedAndInHealth(t *testing.T) {
	const leaseLen = time.Hour
	e := newEnv(t, idkeeper.Config{Nodes: 1, LeaseDuration: leaseLen})
	a := e.open(e.config())
	e.removeBehindBack(a) // no mintedUpTo: the watermark stays at A's expiry, t0+1h
	b := e.open(e.config())
	opens := t0.Add(leaseLen + time.Millisecond)
	if nb := b.Leases()[0].NotBefore; !nb.Equal(opens) {
		t.Fatalf("B's window starts at %v, want %v", nb, opens)
	}
	line := "node ID 0 is cooling: minting from 2026-03-01T13:00:00.001Z (in 1h0m0s)"
	if n := strings.Count(e.logs.String(), line); n != 1 {
		t.Fatalf("%d log lines %q, want 1; logs:\n%s", n, line, e.logs.String())
	}

	err := b.Check()
	var ce *client.CoolingError
	if !errors.As(err, &ce) || !errors.Is(err, snowflake.ErrBeforeWindow) || ce.NodeID != 0 || !ce.NotBefore.Equal(opens) {
		t.Fatalf("B's Check = %v, want a CoolingError for node 0 wrapping ErrBeforeWindow", err)
	}
	if want := "the generator waits until 2026-03-01T13:00:00.001Z (in 1h0m0s) to mint"; !strings.Contains(err.Error(), want) {
		t.Fatalf("B's Check = %q, want it to say %q", err, want)
	}

	// Renewals keep the lease (same node ID and token): no second log line.
	e.clk.Advance(leaseLen / 2)
	if err := e.expectFatal(); !errors.Is(err, client.ErrLeaseLost) {
		t.Fatalf("A: %v", err)
	}
	if err := b.Check(); err == nil || !strings.Contains(err.Error(), "(in 30m0s)") {
		t.Fatalf("B's Check half an hour later = %v", err)
	}
	if n := strings.Count(e.logs.String(), "is cooling"); n != 1 {
		t.Fatalf("%d cooling log lines after a renewal, want 1", n)
	}
	e.clk.Advance(leaseLen/2 + time.Millisecond)
	if err := b.Check(); err != nil {
		t.Fatalf("B at its window's start: %v", err)
	}
}

// A session whose node IDs are ready logs nothing about cooling.
func TestReadyNodeIDIsNotCooling(t *testing.T) {
	e := newEnv(t, idkeeper.Config{Nodes: 1})
	s := e.open(e.config())
	if err := s.Check(); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(e.logs.String(), "cooling") {
		t.Fatalf("cooling logged for a ready node ID:\n%s", e.logs.String())
	}
}
