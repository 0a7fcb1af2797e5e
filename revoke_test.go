package idkeeper_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/protocol"
)

// An operator revokes one lease of a holder (issue #10), end to end on a bbolt
// store and the fake clock: the holder's next Renew, receipts and all, answers
// fewer node IDs (which the client library treats as a lost session); no Alloc, of
// the whole pool or not, gets the node ID before the lease's ExpiresAt + grace;
// afterwards one does, its window starting after that ExpiresAt.
func TestRevokeLease(t *testing.T) {
	const nodes = 8
	e := newEnv(t, idkeeper.Config{Nodes: nodes})
	ctx := context.Background()
	grace := e.reg.Config().Grace
	g, err := e.reg.Alloc(ctx, idkeeper.AllocRequest{Requester: who(1), Count: 2})
	if err != nil {
		t.Fatal(err)
	}
	g, err = e.reg.Renew(ctx, idkeeper.RenewRequest{Requester: who(1), Receipts: receipts(g)})
	if err != nil || len(g.Leases) != 2 {
		t.Fatalf("renew: %v %+v", err, g)
	}
	e.clk.Advance(time.Minute)
	victim, kept := g.Leases[0], g.Leases[1]

	l, err := e.reg.RevokeLease(ctx, victim.NodeID, victim.FencingToken)
	if err != nil {
		t.Fatalf("RevokeLease: %v", err)
	}
	if l.NodeID != victim.NodeID || l.FencingToken != victim.FencingToken || l.Requester.Key() != who(1).Key() ||
		!l.ExpiresAt.Equal(victim.ExpiresAt) || !l.NotBefore.Equal(victim.NotBefore) {
		t.Fatalf("RevokeLease returned %+v, want the lease as it was, %+v", l, victim)
	}
	until := victim.ExpiresAt.Add(grace)
	line := ""
	for s := range strings.SplitSeq(e.logs.String(), "\n") {
		if strings.Contains(s, "lease revoked") {
			line = s
		}
	}
	for _, want := range []string{"level=WARN", fmt.Sprintf("node=%d ", victim.NodeID),
		fmt.Sprintf("token=%d ", victim.FencingToken), "requester.key=" + who(1).Key(), "requester.machineId=" + who(1).MachineID, "keyId=",
		"quarantinedUntil=" + until.Format("2006-01-02T15:04:05.000Z07:00")} {
		if !strings.Contains(line, want) {
			t.Fatalf("revoke log line %q lacks %q", line, want)
		}
	}

	// The holder's next Renew, with every receipt it has: one node ID fewer.
	rg, err := e.reg.Renew(ctx, idkeeper.RenewRequest{Requester: who(1), Receipts: receipts(g)})
	if err != nil {
		t.Fatal(err)
	}
	if len(rg.Leases) != 1 || rg.Leases[0].NodeID != kept.NodeID || len(rg.Restored)+len(rg.Contested) != 0 {
		t.Fatalf("Renew after the revocation = %+v, want only node %d", rg, kept.NodeID)
	}

	// Revoking again, a wrong token, a node outside the pool: NOT_FOUND.
	for _, c := range []struct {
		node  idkeeper.NodeID
		token uint64
	}{{victim.NodeID, victim.FencingToken}, {kept.NodeID, kept.FencingToken + 1}, {nodes, 1}, {-1, 1}} {
		_, err := e.reg.RevokeLease(ctx, c.node, c.token)
		var ie *idkeeper.Error
		if !errors.As(err, &ie) || ie.Code != protocol.CodeNotFound {
			t.Fatalf("RevokeLease(%d, %d) = %v, want a NOT_FOUND *idkeeper.Error", c.node, c.token, err)
		}
	}

	// Allocs of the whole allocatable pool leave the node out until ExpiresAt + grace.
	allocAll := func(pid int) []idkeeper.NodeID {
		t.Helper()
		c, err := e.reg.Remaining(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.reg.Alloc(ctx, idkeeper.AllocRequest{Requester: who(pid), Count: c.Remaining + 1}); protocol.ErrorCode(err) != protocol.CodeNodeIDsExhausted {
			t.Fatalf("Alloc of %d node IDs with %d allocatable: %v", c.Remaining+1, c.Remaining, err)
		}
		if c.Remaining == 0 {
			return nil
		}
		ag, err := e.reg.Alloc(ctx, idkeeper.AllocRequest{Requester: who(pid), Count: c.Remaining})
		if err != nil {
			t.Fatal(err)
		}
		var ids []idkeeper.NodeID
		for _, l := range ag.Leases {
			ids = append(ids, l.NodeID)
		}
		return ids
	}
	for i, at := range []time.Time{e.clk.Now(), victim.ExpiresAt, until.Add(-time.Millisecond)} {
		e.clk.Set(at)
		if _, _, err := e.reg.Cleanup(ctx); err != nil {
			t.Fatal(err)
		}
		if c, _ := e.reg.Remaining(ctx); c.Quarantined != 1 {
			t.Fatalf("at %s: counts %+v, want the revoked node ID quarantined", at, c)
		}
		if ids := allocAll(10 + i); slices.Contains(ids, victim.NodeID) {
			t.Fatalf("at %s, before ExpiresAt + grace, Alloc granted the revoked node ID: %v", at, ids)
		}
		if _, err := e.reg.Remove(ctx, idkeeper.RemoveRequest{Requester: who(10 + i), MintedUpTo: e.clk.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	e.clk.Set(until)
	ids := allocAll(20)
	if !slices.Contains(ids, victim.NodeID) {
		t.Fatalf("at ExpiresAt + grace, Alloc of the whole pool = %v, want node %d in it", ids, victim.NodeID)
	}
	st, err := e.store.Node(ctx, victim.NodeID)
	if err != nil || st.Lease == nil || !st.Lease.NotBefore.After(victim.ExpiresAt) {
		t.Fatalf("the new lease of the revoked node ID: %+v, %v; want NotBefore after %s", st.Lease, err, victim.ExpiresAt)
	}
}

// A failing store is STORE_UNAVAILABLE, as for every lease call.
func TestRevokeLease_StoreUnavailable(t *testing.T) {
	e := newEnv(t, idkeeper.Config{Nodes: 4})
	g, err := e.reg.Alloc(context.Background(), idkeeper.AllocRequest{Requester: who(1), Count: 1})
	if err != nil {
		t.Fatal(err)
	}
	e.store.Close()
	_, err = e.reg.RevokeLease(context.Background(), g.Leases[0].NodeID, g.Leases[0].FencingToken)
	if code := protocol.ErrorCode(err); code != protocol.CodeStoreUnavailable {
		t.Fatalf("RevokeLease on a closed store: %v (code %q), want STORE_UNAVAILABLE", err, code)
	}
}
