package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper/server"
)

// startBinary starts the idkeeper binary with args and env (added to the
// process's), and returns its JSON log and the "addr" of the first log line whose
// message is msg. The process is killed at the end of the test.
func startBinary(t *testing.T, msg string, env []string, args ...string) (*exec.Cmd, *lockedBuffer, string) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = append(os.Environ(), env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	logs := &lockedBuffer{eof: make(chan struct{})}
	addr := make(chan string, 1)
	go func() {
		defer close(logs.eof)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			fmt.Fprintf(logs, "%s\n", sc.Bytes())
			var rec struct{ Msg, Addr string }
			if json.Unmarshal(sc.Bytes(), &rec) == nil && rec.Msg == msg {
				select {
				case addr <- rec.Addr:
				default:
				}
			}
		}
	}()
	select {
	case a := <-addr:
		return cmd, logs, a
	case <-time.After(20 * time.Second):
		t.Fatalf("%v: no %q in the log:\n%s", args, msg, logs)
		return nil, nil, ""
	}
}

// stopBinary sends SIGTERM and waits for a clean exit.
func stopBinary(t *testing.T, cmd *exec.Cmd, logs *lockedBuffer) {
	t.Helper()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// Wait closes the pipe: read the log to its end first, or its last lines
	// (the clean stop's) may be lost.
	if logs.eof != nil {
		select {
		case <-logs.eof:
		case <-time.After(30 * time.Second):
			t.Fatalf("did not stop on SIGTERM:\n%s", logs)
		}
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	select {
	case err := <-waited:
		if err != nil {
			t.Fatalf("exit: %v\n%s", err, logs)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("did not stop on SIGTERM:\n%s", logs)
	}
}

// waitLog waits until the log holds s.
func waitLog(t *testing.T, logs *lockedBuffer, s string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(logs.String(), s) {
		if time.Now().After(deadline) {
			t.Fatalf("the log lacks %s:\n%s", s, logs)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestGatewayBinary runs the real binaries: a server, and a gateway leasing two
// node IDs from it with consumer keys and a bolt idempotency store; it issues IDs
// over HTTP, stops the gateway with SIGTERM and sees the node IDs given back.
func TestGatewayBinary(t *testing.T) {
	dir := t.TempDir()
	if out, err := exec.Command(binary, "init", "--store", "bolt:"+filepath.Join(dir, "idkeeper.db"), "--nodes", "8").CombinedOutput(); err != nil {
		t.Fatalf("init: %v %s", err, out)
	}
	srv, srvLogs, srvAddr := startBinary(t, "listening", []string{BootstrapKeyEnv + "=" + bootstrapKey},
		"server", "--listen", "127.0.0.1:0", "--store", "bolt:"+filepath.Join(dir, "idkeeper.db"), "--log-format", "json", "--nodes", "8")
	reg := &client{t: t, base: "http://" + srvAddr, key: bootstrapKey}

	const consumer, other = "idk_consumer-key-for-the-binary-test-01", "idk_another-consumer-key-from-the-env-02"
	sum := sha256.Sum256([]byte(consumer))
	keysFile := filepath.Join(dir, "consumers")
	if err := os.WriteFile(keysFile, []byte("# billing\n"+hex.EncodeToString(sum[:])+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	gwCmd, logs, gwAddr := startBinary(t, "gateway listening; leasing node IDs",
		[]string{"IDKEEPER_API_KEY=" + bootstrapKey, "IDKEEPER_MAX_COUNT=100", ConsumerKeysEnv + "=" + other},
		"gateway", "--listen", "127.0.0.1:0", "--server", reg.base, "--node-ids", "2", "--log-format", "json",
		"--idempotency-store", "bolt:"+filepath.Join(dir, "gw", "idem.db"), "--consumer-keys-file", keysFile)
	waitLog(t, logs, `"msg":"gateway ready: issuing IDs"`)
	gw := &client{t: t, base: "http://" + gwAddr, key: consumer}

	if r := (&client{t: t, base: gw.base}).do("POST", "/v1/ids", `{"count":1}`, 401); r["code"] != "API_KEY_MISSING" {
		t.Fatalf("no key: %v", r)
	}
	first := gw.do("POST", "/v1/ids", `{"count":100}`, 200)
	if n := len(first["ids"].([]any)); n != 100 {
		t.Fatalf("%d IDs", n)
	}
	(&client{t: t, base: gw.base, key: other}).do("POST", "/v1/ids?format=string", `{"count":3}`, 200)
	if r := gw.do("POST", "/v1/ids", `{"count":101}`, 400); r["code"] != "COUNT_TOO_LARGE" || r["maxCount"] != 100.0 {
		t.Fatalf("count 101: %v", r)
	}
	a, b := idempotentPost(t, gw, "k1"), idempotentPost(t, gw, "k1")
	if a != b {
		t.Fatalf("an Idempotency-Key retry got another answer:\n%s\n%s", a, b)
	}
	gw.do("GET", "/health", "", 200)
	if m := gw.raw("GET", "/metrics"); !strings.Contains(m, "idkeeper_gateway_ids_issued_total 107") ||
		!strings.Contains(m, "idkeeper_client_healthy 1") || !strings.Contains(m, "go_goroutines") {
		t.Fatalf("metrics:\n%s", m)
	}
	if r := reg.do("GET", "/v1/leases/remaining", "", 200); r["leased"] != 2.0 {
		t.Fatalf("registry while the gateway runs: %v", r)
	}

	stopBinary(t, gwCmd, logs)
	if r := reg.do("GET", "/v1/leases/remaining", "", 200); r["leased"] != 0.0 || r["remaining"] != 8.0 {
		t.Fatalf("the gateway did not give its node IDs back: %v", r)
	}
	all := logs.String()
	for _, secret := range []string{bootstrapKey, consumer, other} {
		if strings.Contains(all, secret) {
			t.Fatalf("a key was logged:\n%s", all)
		}
	}
	if !strings.Contains(all, `"msg":"gateway stopped"`) {
		t.Fatalf("no clean stop:\n%s", all)
	}
	stopBinary(t, srv, srvLogs)
}

func idempotentPost(t *testing.T, c *client, key string) string {
	t.Helper()
	req, _ := http.NewRequest("POST", c.base+"/v1/ids", strings.NewReader(`{"count":4}`))
	req.Header.Set("X-API-Key", c.key)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	return string(b)
}

func TestGatewayRefusesBadSettings(t *testing.T) {
	dir := t.TempDir()
	base := []string{"gateway", "--listen", "127.0.0.1:0", "--idempotency-store", "bolt:" + filepath.Join(dir, "idem.db")}
	keyEnv := map[string]string{"IDKEEPER_API_KEY": bootstrapKey}
	cases := []struct {
		args []string
		env  map[string]string
		want string
	}{
		{nil, keyEnv, "--server is required"},
		{[]string{"--server", "idkeeper:8080"}, keyEnv, "want an http:// or https:// URL"},
		{[]string{"--server", "http://127.0.0.1:1"}, nil, "IDKEEPER_API_KEY(_FILE) or --api-key is required"},
		{[]string{"--server", "http://127.0.0.1:1", "--node-ids", "0"}, keyEnv, "node-ids = 0 is outside its range 1..4096"},
		{[]string{"--server", "http://127.0.0.1:1", "--node-ids", "4", "--node-ids-max", "2"}, keyEnv, "node-ids-max = 2 is outside its range 4 (--node-ids)..4096"},
		{[]string{"--server", "http://127.0.0.1:1", "--node-ids-max", "4097"}, keyEnv, "node-ids-max = 4097 is outside its range 1 (--node-ids)..4096"},
		{[]string{"--server", "http://127.0.0.1:1"}, map[string]string{"IDKEEPER_API_KEY": bootstrapKey, "IDKEEPER_NODE_IDS_MAX": "-1"}, "node-ids-max = -1 is outside its range"},
		{[]string{"--server", "http://127.0.0.1:1"}, map[string]string{"IDKEEPER_API_KEY": bootstrapKey, "IDKEEPER_MAX_COUNT": "2000000"}, "max-count = 2000000 is outside its range 1..1000000"},
		{[]string{"--server", "http://127.0.0.1:1", "--idempotency-store", "memory"}, keyEnv, "want bolt:PATH, redis://"},
		{[]string{"--server", "http://127.0.0.1:1", "--idempotency-store", "none", "--idempotency-required"}, keyEnv, "--idempotency-required needs an --idempotency-store"},
		{[]string{"--server", "http://127.0.0.1:1", "--idempotency-ttl", "0"}, keyEnv, "--idempotency-ttl 0s: want at least 1ms"},
		{[]string{"--server", "http://127.0.0.1:1", "--idempotency-max-records", "-1"}, keyEnv, "--idempotency-max-records -1: want 0 (no cap) or more"},
		{[]string{"--server", "http://127.0.0.1:1", "--api-key", bootstrapKey, "--api-key-file", filepath.Join(dir, "missing")}, nil, "give --api-key or --api-key-file, not both"},
		{[]string{"--server", "http://127.0.0.1:1", "--consumer-keys-file", filepath.Join(dir, "missing")}, keyEnv, "--consumer-keys-file: open"},
		{[]string{"--server", "http://127.0.0.1:1"}, map[string]string{"IDKEEPER_API_KEY": bootstrapKey, ConsumerKeysEnv: "short"}, "IDKEEPER_CONSUMER_KEYS line 1: a plaintext key needs at least 24 characters"},
		{[]string{"--server", "http://127.0.0.1:1"}, map[string]string{"IDKEEPER_API_KEY": bootstrapKey, ConsumerKeysEnv: "sha256:abc"}, "a sha256: entry needs 64 hex digits"},
	}
	for _, c := range cases {
		code, _, stderr := runInProcess(context.Background(), append(append([]string{}, base...), c.args...), c.env)
		if code != exitUsage || !strings.Contains(stderr, c.want) {
			t.Errorf("%v %v: exit %d, stderr %q; want exit 2 and %q", c.args, c.env, code, stderr, c.want)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "idem.db")); err == nil {
		t.Error("the idempotency store was created before the settings were checked")
	}
}

// A gateway whose registry refuses its API key stops with status 1 and says why;
// one whose registry is not there yet serves /livez and answers 503 until stopped.
func TestGatewayInProcess(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv, err := server.Open(ctx, server.Config{Listen: "127.0.0.1:0", Store: "bolt:" + filepath.Join(t.TempDir(), "r.db"),
		InitStore: true, BootstrapAPIKey: bootstrapKey, ShutdownTimeout: time.Second, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	args := []string{"gateway", "--listen", "127.0.0.1:0", "--server", "http://" + srv.Addr().String(), "--idempotency-store", "none"}
	code, _, stderr := runInProcess(ctx, args, map[string]string{"IDKEEPER_API_KEY": "idk_not-the-right-key-0123456789"})
	if code != exitFail || !strings.Contains(stderr, "API_KEY_INVALID") {
		t.Fatalf("wrong registry key: exit %d:\n%s", code, stderr)
	}

	g, err := startGateway(gatewayConfig{Listen: "127.0.0.1:0", ServerURL: "http://127.0.0.1:1", APIKey: bootstrapKey, NodeIDs: 1,
		MaxCount: 10, IdempotencyStore: "none", ShutdownTimeout: time.Second, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	c := &client{t: t, base: "http://" + g.Addr().String()}
	c.do("GET", "/livez", "", 200)
	if r := c.do("GET", "/health", "", 503); r["code"] != "ISSUING_UNAVAILABLE" {
		t.Fatalf("health while Open retries: %v", r)
	}
	c.do("POST", "/v1/ids", `{"count":1}`, 503)
	stopped, stop := context.WithCancel(context.Background())
	stop()
	if err := g.wait(stopped); err != nil {
		t.Fatalf("stop while Open retries: %v", err)
	}
}

func quietLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// --alloc-backoff-initial and --alloc-backoff-max shape the session's Alloc
// retries: with 20–50 ms, a gateway started before its registry mints within a
// fraction of a second of the registry coming up (the library's default would
// wait 3 s and more); out-of-range values are usage errors.
func TestGatewayAllocBackoffFlags(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	store := "bolt:" + filepath.Join(t.TempDir(), "r.db")
	gwDone := make(chan struct{})
	var gwBase string
	var mu sync.Mutex
	go func() {
		defer close(gwDone)
		g, err := startGateway(gatewayConfig{Listen: "127.0.0.1:0", ServerURL: "http://" + addr, APIKey: bootstrapKey, NodeIDs: 1,
			MaxCount: 10, IdempotencyStore: "none", ShutdownTimeout: time.Second, Logger: quietLogger(),
			AllocBackoffInitial: 20 * time.Millisecond, AllocBackoffMax: 50 * time.Millisecond})
		if err != nil {
			t.Error(err)
			return
		}
		mu.Lock()
		gwBase = "http://" + g.Addr().String()
		mu.Unlock()
		<-ctx.Done()
		stopped, stop := context.WithCancel(context.Background())
		stop()
		_ = g.wait(stopped)
	}()
	time.Sleep(300 * time.Millisecond) // the gateway retries meanwhile
	srv, err := server.Open(ctx, server.Config{Listen: addr, Store: store, InitStore: true, BootstrapAPIKey: bootstrapKey,
		ShutdownTimeout: time.Second, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	up := time.Now()
	for {
		mu.Lock()
		base := gwBase
		mu.Unlock()
		if base != "" && (&client{t: t, base: base}).status("GET", "/health") == 200 {
			break
		}
		if time.Since(up) > 2*time.Second {
			t.Fatalf("the gateway did not mint within 2 s of the registry coming up (base %q)", base)
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	<-gwDone

	for _, args := range [][]string{
		{"--alloc-backoff-initial", "1ms"},
		{"--alloc-backoff-initial", "2s", "--alloc-backoff-max", "1s"},
		{"--renew-retry-min", "0s"},
		{"--renew-retry-min", "1m", "--renew-retry-max", "30s"},
	} {
		full := append([]string{"gateway", "--server", "http://127.0.0.1:1", "--idempotency-store", "none"}, args...)
		if code, _, stderr := runInProcess(context.Background(), full, map[string]string{"IDKEEPER_API_KEY": bootstrapKey}); code != exitUsage {
			t.Errorf("%q: exit %d, %s", args, code, stderr)
		}
	}
}
