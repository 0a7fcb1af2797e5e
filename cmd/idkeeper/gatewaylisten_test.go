package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper/server"
)

// gatewayConfigOf parses the gateway's flags and environment as the command does
// and returns the checked config.
func gatewayConfigOf(args []string, env map[string]string) (gatewayConfig, error) {
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	fs := newFlagSet("gateway", io.Discard)
	var f gatewayFlags
	f.register(fs)
	if err := parseFlags(fs, args, lookup); err != nil {
		return gatewayConfig{}, err
	}
	return f.config(lookup, io.Discard)
}

// --server takes several registry replicas: repeated, comma-separated, or both,
// from the flag or IDKEEPER_SERVER, in order; duplicates, more than 16 and
// non-http URLs are usage errors naming the flag.
func TestGatewayServerList(t *testing.T) {
	key := map[string]string{"IDKEEPER_API_KEY": bootstrapKey}
	base := []string{"--idempotency-store", "none"}
	for _, c := range []struct {
		args []string
		env  map[string]string
		want []string
	}{
		{[]string{"--server", "http://r1:8080"}, key, []string{"http://r1:8080"}},
		{[]string{"--server", "http://r1:8080, http://r2:8080", "--server", "https://r3:8443"}, key,
			[]string{"http://r1:8080", "http://r2:8080", "https://r3:8443"}},
		{nil, map[string]string{"IDKEEPER_API_KEY": bootstrapKey, "IDKEEPER_SERVER": "http://r1:8080,http://r2:8080"},
			[]string{"http://r1:8080", "http://r2:8080"}},
	} {
		cfg, err := gatewayConfigOf(append(slices.Clone(base), c.args...), c.env)
		if err != nil {
			t.Fatalf("%q: %v", c.args, err)
		}
		if !slices.Equal(cfg.ServerURLs, c.want) || cfg.ServerURL != "" {
			t.Fatalf("%q %v: servers %q, want %q", c.args, c.env, cfg.ServerURLs, c.want)
		}
	}
	many := make([]string, 17)
	for i := range many {
		many[i] = "http://r" + string(rune('a'+i)) + ":8080"
	}
	for _, c := range []struct {
		servers, want string
	}{
		{"http://r1:8080,http://r1:8080/", `--server names "http://r1:8080/" twice`},
		{"http://r1:8080,r2:8080", `--server "r2:8080": want an http:// or https:// URL`},
		{strings.Join(many, ","), "--server names 17 URLs: at most 16"},
		{",", "--server is required"},
	} {
		_, err := gatewayConfigOf(append(slices.Clone(base), "--server", c.servers), key)
		if _, usage := err.(usageError); !usage || !strings.Contains(err.Error(), c.want) {
			t.Errorf("--server %s: %v, want a usage error with %q", c.servers, err, c.want)
		}
	}
}

// A gateway given a dead registry URL first and a live one second leases from the
// live one and issues IDs; its log names both.
func TestGatewayFailsOverToTheNextRegistry(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv, err := server.Open(ctx, server.Config{Listen: "127.0.0.1:0", Store: "bolt:" + filepath.Join(t.TempDir(), "r.db"),
		InitStore: true, BootstrapAPIKey: bootstrapKey, ShutdownTimeout: time.Second, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + ln.Addr().String()
	ln.Close() // connections refused
	live := "http://" + srv.Addr().String()
	g := startGatewayCmd(t, []string{"--server", dead + "," + live, "--idempotency-store", "none"},
		map[string]string{"IDKEEPER_API_KEY": bootstrapKey})
	r := (&client{t: t, base: g.base}).do("POST", "/v1/ids", `{"count":3}`, 200)
	if ids, _ := r["ids"].([]any); len(ids) != 3 {
		t.Fatalf("POST /v1/ids: %v", r)
	}
	logs := g.logs.String()
	if !strings.Contains(logs, `"server":"`+dead+","+live+`"`) || !strings.Contains(logs, "registry replica failed; trying the next one") {
		t.Fatalf("the log does not name both replicas and the failover:\n%s", logs)
	}
	if code := g.stop(); code != 0 {
		t.Fatalf("exit %d:\n%s", code, g.logs)
	}
}

// Without consumer keys the gateway listens on loopback by default; with them on
// every interface, as before; a --listen or IDKEEPER_LISTEN given wins either way.
func TestGatewayDefaultListen(t *testing.T) {
	key := map[string]string{"IDKEEPER_API_KEY": bootstrapKey}
	withKeys := map[string]string{"IDKEEPER_API_KEY": bootstrapKey, ConsumerKeysEnv: "idk_a-consumer-key-for-the-listen-test"}
	base := []string{"--server", "http://r1:8080", "--idempotency-store", "none"}
	for _, c := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{nil, key, "127.0.0.1:8081"},
		{nil, withKeys, ":8081"},
		{[]string{"--listen", ":9000"}, key, ":9000"},
		{[]string{"--listen", "127.0.0.1:9000"}, withKeys, "127.0.0.1:9000"},
		{nil, map[string]string{"IDKEEPER_API_KEY": bootstrapKey, "IDKEEPER_LISTEN": "0.0.0.0:9001"}, "0.0.0.0:9001"},
	} {
		cfg, err := gatewayConfigOf(append(slices.Clone(base), c.args...), c.env)
		if err != nil {
			t.Fatalf("%q: %v", c.args, err)
		}
		if cfg.Listen != c.want {
			t.Errorf("%q, %d consumer keys: listens on %q, want %q", c.args, cfg.ConsumerKeys.Len(), cfg.Listen, c.want)
		}
	}
}

// A gateway without consumer keys told to listen beyond loopback warns at start;
// on loopback, or with consumer keys, it does not.
func TestGatewayWarnsWhenOpenWithoutKeys(t *testing.T) {
	keys, err := gatewayConfigOf([]string{"--server", "http://r1:8080", "--idempotency-store", "none"},
		map[string]string{"IDKEEPER_API_KEY": bootstrapKey, ConsumerKeysEnv: "idk_a-consumer-key-for-the-listen-test"})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		listen string
		keyed  bool
		warns  bool
	}{
		{"0.0.0.0:0", false, true},
		{"[::]:0", false, true},
		{":0", false, true},
		{"127.0.0.1:0", false, false},
		{"[::1]:0", false, false},
		{"localhost:0", false, false},
		{"0.0.0.0:0", true, false},
	} {
		var buf lockedBuffer
		cfg := gatewayConfig{Listen: c.listen, ServerURL: "http://127.0.0.1:1", APIKey: bootstrapKey, NodeIDs: 1,
			MaxCount: 10, IdempotencyStore: "none", ShutdownTimeout: time.Second,
			Logger: slog.New(slog.NewJSONHandler(&buf, nil))}
		if c.keyed {
			cfg.ConsumerKeys = keys.ConsumerKeys
		}
		g, err := startGateway(cfg)
		if err != nil {
			if strings.Contains(c.listen, "::") && strings.Contains(err.Error(), "address") {
				t.Logf("%s: no IPv6 here: %v", c.listen, err)
				continue
			}
			t.Fatalf("%s: %v", c.listen, err)
		}
		stopped, stop := context.WithCancel(context.Background())
		stop()
		if err := g.wait(stopped); err != nil {
			t.Fatal(err)
		}
		var warned bool
		for line := range strings.SplitSeq(buf.String(), "\n") {
			var rec struct{ Level, Msg, Listen string }
			if json.Unmarshal([]byte(line), &rec) == nil && rec.Level == "WARN" && strings.Contains(rec.Msg, "has no consumer keys") {
				warned = rec.Listen == c.listen && strings.Contains(rec.Msg, ConsumerKeysEnv)
			}
		}
		if warned != c.warns {
			t.Errorf("--listen %s, consumer keys %v: warned %v, want %v:\n%s", c.listen, c.keyed, warned, c.warns, buf.String())
		}
	}
}
