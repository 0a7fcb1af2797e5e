package http_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper"
)

// A node ID released without mintedUpTo (a crash, the old README walk-through)
// cools until its lease's expiry: /v1/leases/remaining counts it as remaining and as
// cooling, says when it opens, the pool gauges show it, and a grant of it is counted
// and logged with its wait (issue #20).
func TestRemainingShowsCooling(t *testing.T) {
	stores(t, remainingShowsCooling, withConfig(func(c *idkeeper.Config) { c.Nodes = 3 }))
}

func remainingShowsCooling(t *testing.T, h *harness) {
	const pool = 3
	who := requesterJSON(7)
	h.post("/v1/leases", `{"requester":`+who+`,"count":2}`).ok(t)
	renewed := h.post("/v1/leases/renew", `{"requester":`+who+`}`).ok(t).leases(t)
	expires := start.Add(48 * time.Hour)
	if renewed[0].ExpiresAt != ts(expires) {
		t.Fatalf("renewed %+v", renewed)
	}
	h.clk.Advance(time.Minute)
	h.post("/v1/leases/remove", `{"requester":`+who+`}`).ok(t) // no mintedUpTo

	r := h.get("/v1/leases/remaining").ok(t)
	assertKeys(t, r.raw, "first", "last", "total", "remaining", "leased", "inGrace", "quarantined", "cooling", "nextReadyAt")
	assertCounts(t, r, pool, pool, 0, 0, 0)
	if r.num("cooling") != 2 || r.str("nextReadyAt") != ts(expires.Add(time.Millisecond)) {
		t.Fatalf("remaining: %s; want 2 cooling until %s", r.raw, ts(expires.Add(time.Millisecond)))
	}
	if got := metricValue(t, h, "idkeeper_nodes_cooling"); got != 2 {
		t.Errorf("idkeeper_nodes_cooling = %v, want 2", got)
	}
	if got, want := metricValue(t, h, "idkeeper_nodes_next_ready_timestamp_seconds"), float64(expires.Add(time.Millisecond).UnixMilli())/1000; got != want {
		t.Errorf("idkeeper_nodes_next_ready_timestamp_seconds = %v, want %v", got, want)
	}

	// The whole pool: the ready node ID and both cooling ones.
	grant := h.post("/v1/leases", `{"requester":`+requesterJSON(8)+`,"count":3}`).ok(t).leases(t)
	waiting := 0
	for _, l := range grant {
		if l.NotBefore > ts(h.clk.Now()) {
			waiting++
		}
	}
	if waiting != 2 {
		t.Fatalf("grant %+v: %d node IDs wait, want 2", grant, waiting)
	}
	if got := metricValue(t, h, "idkeeper_cooling_grants_total"); got != 2 {
		t.Errorf("idkeeper_cooling_grants_total = %v, want 2", got)
	}
	logs := h.logs.String()
	if !strings.Contains(logs, "alloc granted cooling node IDs") || !strings.Contains(logs, `"cooling":2`) ||
		!strings.Contains(logs, "=47h59m0.001s") {
		t.Errorf("no cooling-grant log line with the waits: %s", logs)
	}
	// An idempotent repeat of the Alloc (a retry, a second later) is not counted again.
	h.clk.Advance(time.Second)
	h.post("/v1/leases", `{"requester":`+requesterJSON(8)+`,"count":3}`).ok(t)
	if got := metricValue(t, h, "idkeeper_cooling_grants_total"); got != 2 {
		t.Errorf("idkeeper_cooling_grants_total after a repeated Alloc = %v, want 2", got)
	}
	r = h.get("/v1/leases/remaining").ok(t)
	if r.num("cooling") != 0 || r.str("nextReadyAt") != "" {
		t.Fatalf("remaining with every node ID held: %s", r.raw)
	}
	if _, _, err := h.reg.Cleanup(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := metricValue(t, h, "idkeeper_machine_node_ids", "machine_id", "host-a"); got != 3 {
		t.Errorf("idkeeper_machine_node_ids{host-a} = %v, want 3", got)
	}
}
