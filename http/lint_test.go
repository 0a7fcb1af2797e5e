package http_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"

	"github.com/idkeeper/idkeeper/protocol"
)

// The server's /metrics passes the ecosystem's lint (promlint, the checks behind
// `promtool check metrics`) with zero problems: every series of a registry that
// served traffic, with the pool gauges, and the Go, process and build-info
// collectors the idkeeper binary registers next to them.
func TestMetricsLint(t *testing.T) {
	h := newBolt(t)
	h.prom.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		collectors.NewBuildInfoCollector(),
	)
	who := requesterJSON(1)
	h.post("/v1/leases", `{"requester":`+who+`,"count":2,"clientUtcNow":"`+ts(start.Add(-time.Hour))+`"}`).problem(t, protocol.CodeClockSkewTooLarge)
	h.post("/v1/leases", `{"requester":`+who+`,"count":2,"clientUtcNow":"`+ts(start)+`"}`).ok(t)
	h.post("/v1/leases/renew", `{"requester":`+who+`,"clientUtcNow":"`+ts(start)+`"}`).ok(t)
	if _, _, err := h.reg.Cleanup(context.Background()); err != nil { // the machine gauges
		t.Fatal(err)
	}
	h.post("/v1/leases/remove", `{"requester":`+who+`}`).ok(t) // cooling: the next-ready gauge

	r := h.get("/metrics", "X-API-Key", "")
	if r.status != 200 {
		t.Fatalf("/metrics: %d", r.status)
	}
	for _, s := range []string{"idkeeper_nodes ", "idkeeper_nodes_cooling 2", "idkeeper_nodes_next_ready_timestamp_seconds ",
		`idkeeper_machine_node_ids{machine_id="host-a"} 2`, "idkeeper_cooling_grants_total 0"} {
		if !strings.Contains(string(r.raw), s) {
			t.Fatalf("/metrics lacks %q:\n%s", s, r.raw)
		}
	}
	lintClean(t, r.raw)
}

// lintClean fails the test for every problem promlint finds in a text exposition.
func lintClean(t *testing.T, exposition []byte) {
	t.Helper()
	problems, err := promlint.New(bytes.NewReader(exposition)).Lint()
	if err != nil {
		t.Fatalf("promlint: %v", err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
}
