package main

import (
	"context"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper/server"
)

// --node-ids-max: accepted from --node-ids to 4096 (0: off); a gateway started
// with it holds --node-ids node IDs at first and shows them, with the grow and
// shrink counters, on /metrics.
func TestGatewayNodeIDsMax(t *testing.T) {
	for _, c := range []struct {
		args []string
		want int
	}{
		{nil, 0},
		{[]string{"--node-ids-max", "0"}, 0},
		{[]string{"--node-ids", "2", "--node-ids-max", "2"}, 2},
		{[]string{"--node-ids-max", "4"}, 4},
		{[]string{"--node-ids-max", "4096"}, 4096},
	} {
		fs := newFlagSet("gateway", io.Discard)
		var f gatewayFlags
		f.register(fs)
		env := func(k string) (string, bool) {
			if k == "IDKEEPER_API_KEY" {
				return bootstrapKey, true
			}
			return "", false
		}
		if err := parseFlags(fs, append([]string{"--server", "http://127.0.0.1:1"}, c.args...), env); err != nil {
			t.Fatal(err)
		}
		cfg, err := f.config(env, io.Discard)
		if err != nil || cfg.NodeIDsMax != c.want {
			t.Errorf("%v: NodeIDsMax %d, %v; want %d", c.args, cfg.NodeIDsMax, err, c.want)
		}
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv, err := server.Open(ctx, server.Config{Listen: "127.0.0.1:0", Store: "bolt:" + filepath.Join(t.TempDir(), "r.db"),
		InitStore: true, BootstrapAPIKey: bootstrapKey, ShutdownTimeout: time.Second, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	g, err := startGateway(gatewayConfig{Listen: "127.0.0.1:0", ServerURL: "http://" + srv.Addr().String(), APIKey: bootstrapKey,
		NodeIDs: 1, NodeIDsMax: 4, MaxCount: 10, IdempotencyStore: "none", ShutdownTimeout: time.Second, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.waitOpen(ctx); err != nil {
		t.Fatal(err)
	}
	c := &client{t: t, base: "http://" + g.Addr().String()}
	c.do("POST", "/v1/ids", `{"count":10}`, 200)
	m := c.raw("GET", "/metrics")
	for _, want := range []string{"\nidkeeper_client_node_ids 1\n", "\nidkeeper_client_node_id_grows_total 0\n",
		"\nidkeeper_client_node_id_shrinks_total 0\n"} {
		if !strings.Contains(m, want) {
			t.Fatalf("/metrics lacks %q:\n%s", want, m)
		}
	}
	stopped, stop := context.WithCancel(context.Background())
	stop()
	if err := g.wait(stopped); err != nil {
		t.Fatal(err)
	}
}

// dev passes --gateway-node-ids-max to its gateway, checked as --node-ids-max.
func TestDevGatewayNodeIDsMax(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--gateway-node-ids", "3", "--gateway-node-ids-max", "2"}, "gateway-node-ids-max = 2 is outside its range 3 (--gateway-node-ids)..4096"},
		{[]string{"--gateway-node-ids-max", "5000"}, "gateway-node-ids-max = 5000 is outside its range 1 (--gateway-node-ids)..4096"},
	} {
		args := append([]string{"dev", "--data", filepath.Join(dir, "data"), "--listen", "127.0.0.1:0", "--gateway-listen", "127.0.0.1:0"}, c.args...)
		code, _, stderr := runInProcess(context.Background(), args, nil)
		if code != exitUsage || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 and %q", c.args, code, stderr, c.want)
		}
	}
}
