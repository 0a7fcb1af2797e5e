package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper/server"
)

// idkeeper bench against a real registry and gateway on loopback: it prints the
// throughput, the share of the ceiling and the percentiles, as text and JSON;
// bad settings are usage errors.
func TestBench(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv, err := server.Open(ctx, server.Config{Listen: "127.0.0.1:0", Store: "bolt:" + filepath.Join(t.TempDir(), "r.db"),
		InitStore: true, BootstrapAPIKey: bootstrapKey, ShutdownTimeout: time.Second, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	g, err := startGateway(gatewayConfig{Listen: "127.0.0.1:0", ServerURL: "http://" + srv.Addr().String(), APIKey: bootstrapKey,
		NodeIDs: 1, MaxCount: 10_000, IdempotencyStore: "none", ShutdownTimeout: time.Second, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		stopped, stop := context.WithCancel(context.Background())
		stop()
		_ = g.wait(stopped)
	}()
	base := "http://" + g.Addr().String()
	c := &client{t: t, base: base}
	deadline := time.Now().Add(10 * time.Second)
	for c.status("GET", "/health") != 200 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}

	code, out, stderr := runInProcess(ctx, []string{"bench", "--gateway", base, "--clients", "4", "--count", "500", "--duration", "300ms",
		"--node-ids", "1"}, nil)
	if code != exitOK || !strings.Contains(out, "4 clients × count=500") || !strings.Contains(out, "% of the ceiling of 1 node IDs") ||
		!strings.Contains(out, "latency: p50 ") {
		t.Fatalf("bench: exit %d, %q, %s", code, out, stderr)
	}
	code, out, stderr = runInProcess(ctx, []string{"bench", "--json", "--max-requests", "20", "--count", "10"},
		map[string]string{"IDKEEPER_GATEWAY": base, "IDKEEPER_CLIENTS": "2"})
	var r benchResult
	if code != exitOK || json.Unmarshal([]byte(out), &r) != nil || r.Requests != 20 || r.IDs != 200 || r.Clients != 2 ||
		r.P50Ms <= 0 || r.MaxMs < r.P99Ms || r.OfCeiling != 0 {
		t.Fatalf("bench --json: exit %d, %q (%+v), %s", code, out, r, stderr)
	}
	for _, args := range [][]string{
		{"bench"},
		{"bench", "--gateway", "ftp://x"},
		{"bench", "--gateway", base, "--clients", "0"},
		{"bench", "--gateway", base, "--duration", "2h"},
		{"bench", "--gateway", base, "--node-ids", "-1"},
	} {
		if code, _, stderr := runInProcess(ctx, args, nil); code != exitUsage {
			t.Errorf("%q: exit %d, %s", args, code, stderr)
		}
	}
	// A gateway that refuses: exit 1 with its answer.
	if code, _, stderr := runInProcess(ctx, []string{"bench", "--gateway", base, "--count", "20000", "--duration", "1s"}, nil); code != exitFail ||
		!strings.Contains(stderr, "status 400") {
		t.Fatalf("count above the gateway's max: exit %d, %s", code, stderr)
	}
}
