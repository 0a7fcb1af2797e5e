package idkeeper_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/protocol"
)

// Registry.Origin: an ID in a grant's window names that grant; IDs of no grant,
// of a node outside the pool, in the future or before the retention say why not;
// a negative ID is INVALID_REQUEST. The retention job prunes the records of
// leases that ended longer ago than HistoryRetention, never a held one.
func TestOriginAndHistoryRetention(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, idkeeper.Config{Nodes: 8, HistoryRetention: 24 * time.Hour})
	layout := e.reg.Layout()
	w := idkeeper.Requester{MachineID: "m", PID: 1, StartedAt: t0, Instance: "a"}
	g, err := e.reg.Alloc(ctx, idkeeper.AllocRequest{Requester: w, Count: 1,
		Client: idkeeper.ClientInfo{Host: "web-1", Labels: map[string]string{"service": "orders"}}})
	if err != nil {
		t.Fatal(err)
	}
	l := g.Leases[0]
	idAt := func(at time.Time, node int64) int64 {
		t.Helper()
		ts, err := layout.Timestamp(at)
		if err != nil {
			t.Fatal(err)
		}
		id, err := layout.Compose(ts, node, 1)
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	minted := idAt(t0.Add(time.Minute), int64(l.NodeID))
	o, err := e.reg.Origin(ctx, minted)
	if err != nil || len(o.Leases) != 1 || o.Leases[0].Token != l.FencingToken || o.Leases[0].Client.Host != "web-1" ||
		o.Parts.Node != int64(l.NodeID) || o.Note != "" {
		t.Fatalf("Origin = %+v, %v", o, err)
	}
	for _, c := range []struct {
		id   int64
		note string
	}{
		{idAt(t0, int64(l.NodeID)+1), "no grant this store remembers"},
		{idAt(t0, 100), "outside this registry's pool of 8"},
		{idAt(t0.Add(time.Hour), int64(l.NodeID)), "in the future"},
	} {
		if o, err := e.reg.Origin(ctx, c.id); err != nil || len(o.Leases) != 0 || !strings.Contains(o.Note, c.note) {
			t.Errorf("Origin(%d) = %+v, %v; want a note with %q", c.id, o, err, c.note)
		}
	}
	if _, err := e.reg.Origin(ctx, -1); protocol.ErrorCode(err) != protocol.CodeInvalidRequest {
		t.Fatalf("Origin(-1): %v", err)
	}

	// A second lease, held throughout; the first removed, then the retention passes.
	v := idkeeper.Requester{MachineID: "m", PID: 2, StartedAt: t0, Instance: "b"}
	if _, err := e.reg.Alloc(ctx, idkeeper.AllocRequest{Requester: v, Count: 1}); err != nil {
		t.Fatal(err)
	}
	e.clk.Advance(2 * time.Minute)
	if _, err := e.reg.Remove(ctx, idkeeper.RemoveRequest{Requester: w, KeyID: g.Leases[0].KeyID}); err != nil {
		t.Fatal(err)
	}
	if _, _, ran, err := e.reg.PruneAdminRecords(ctx); !ran || err != nil {
		t.Fatalf("retention job: ran %v, %v", ran, err)
	}
	if n, _ := e.store.HistoryCount(ctx); n != 2 {
		t.Fatalf("pruned a record inside the retention: %d left", n)
	}
	e.clk.Advance(25 * time.Hour)
	if _, _, ran, err := e.reg.PruneAdminRecords(ctx); !ran || err != nil {
		t.Fatalf("retention job: ran %v, %v", ran, err)
	}
	if n, _ := e.store.HistoryCount(ctx); n != 1 {
		t.Fatalf("after the retention: %d records, want the held lease's only", n)
	}
	if o, err := e.reg.Origin(ctx, minted); err != nil || len(o.Leases) != 0 || !strings.Contains(o.Note, "retention") {
		t.Fatalf("Origin after the retention = %+v, %v", o, err)
	}
	if _, err := idkeeper.NewRegistry(nil, idkeeper.Config{HistoryRetention: time.Minute}); err == nil ||
		!strings.Contains(err.Error(), "history-retention") {
		t.Fatalf("a retention under 1h: %v", err)
	}
}
