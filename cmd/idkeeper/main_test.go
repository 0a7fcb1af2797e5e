package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/bolt"
	"github.com/idkeeper/idkeeper/internal/harness/redistest"
	"github.com/idkeeper/idkeeper/server"
)

// binary is the idkeeper binary TestMain builds, with version and commit set the
// way a release build sets them.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "idkeeper-cmd-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "idkeeper")
	build := exec.Command("go", "build", "-o", binary, "-ldflags", "-X main.version=v9.9.9-test -X main.commit=testcommit", ".")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

const bootstrapKey = "idk_bootstrap-0123456789abcdefghijklmnop"

// TestBinary runs the real binary: apikey create, then server on a free port with a
// bolt store, the README's curl session over HTTP, and SIGTERM.
func TestBinary(t *testing.T) {
	dir := t.TempDir()
	store := "bolt:" + filepath.Join(dir, "data", "idkeeper.db")

	// Only init makes a bolt store (issue #30): apikey create on no file is refused.
	if out, err := exec.Command(binary, "apikey", "create", "--store", store, "--description", "ci job").CombinedOutput(); err == nil ||
		!strings.Contains(string(out), "idkeeper init --store "+store) {
		t.Fatalf("apikey create before init: %v %s", err, out)
	}
	// A new deployment is initialised once; a second init changes nothing.
	out, err := exec.Command(binary, "init", "--store", store, "--nodes", "8").Output()
	if err != nil || !strings.Contains(string(out), "initialised bolt:") || !strings.Contains(string(out), "generation 1") {
		t.Fatalf("init: %v %s", err, out)
	}
	out, err = exec.Command(binary, "init", "--store", store).Output()
	if err != nil || !strings.Contains(string(out), "initialised already: generation 1") {
		t.Fatalf("init again: %v %s", err, out)
	}
	out, err = exec.Command(binary, "apikey", "create", "--store", store, "--description", "ci job", "--expires", "1h").Output()
	if err != nil {
		t.Fatalf("apikey create: %v", err)
	}
	created := strings.TrimSpace(string(out))
	if !strings.HasPrefix(created, idkeeper.APIKeyPrefix) || strings.Contains(created, "\n") {
		t.Fatalf("apikey create printed %q, want the key alone", out)
	}

	cmd := exec.Command(binary, "server", "--listen", "127.0.0.1:0", "--store", store, "--log-format", "json", "--nodes", "8")
	cmd.Env = append(os.Environ(),
		BootstrapKeyEnv+"="+bootstrapKey,
		"IDKEEPER_FIRST_LEASE=5m", // from the environment
		"IDKEEPER_NODES=10",       // the flag wins
		"IDKEEPER_LOG_LEVEL=debug",
	)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	logs := &lockedBuffer{}
	addr := make(chan string, 1)
	scanned := make(chan struct{})
	go func() { defer close(scanned); scanLogs(stderr, logs, addr) }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })

	var base string
	select {
	case a := <-addr:
		base = "http://" + a
	case <-time.After(20 * time.Second):
		t.Fatalf("server did not log its address:\n%s", logs)
	}

	c := &client{t: t, base: base, key: bootstrapKey}
	v := c.do("GET", "/v1/version", "", 200)
	if v["version"] != "v9.9.9-test" || v["commit"] != "testcommit" {
		t.Fatalf("version %v", v)
	}
	curlSession(c, 8, 0, 5*time.Minute)
	// The key made by apikey create works too.
	(&client{t: t, base: base, key: created}).do("GET", "/v1/leases/remaining", "", 200)
	if r := c.do("GET", "/readyz", "", 200); r["generation"].(map[string]any)["number"] != 1.0 || !strings.Contains(r["durability"].(string), "fsync") {
		t.Fatalf("readyz %v", r)
	}
	if m := c.raw("GET", "/metrics"); !strings.Contains(m, "idkeeper_nodes 8") || !strings.Contains(m, "go_goroutines") ||
		!strings.Contains(m, `idkeeper_registry_phase{phase="ready"} 1`) {
		t.Fatalf("metrics:\n%s", m)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// Wait closes the pipe: read it to its end (the process's exit) first, or the
	// last lines may be lost.
	waited := make(chan error, 1)
	go func() { <-scanned; waited <- cmd.Wait() }()
	select {
	case err := <-waited:
		if err != nil {
			t.Fatalf("server exit: %v\n%s", err, logs)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("server did not stop on SIGTERM:\n%s", logs)
	}
	all := logs.String()
	for _, want := range []string{`"msg":"bootstrap API key created"`, `"msg":"http request"`, `"msg":"stopped"`, `"msg":"generated a receipt secret"`} {
		if !strings.Contains(all, want) {
			t.Errorf("log lacks %s:\n%s", want, all)
		}
	}
	if strings.Contains(all, bootstrapKey) || strings.Contains(all, created) {
		t.Fatalf("an API key was logged:\n%s", all)
	}
	secret, err := os.ReadFile(filepath.Join(dir, "data", server.ReceiptSecretName))
	if err != nil || strings.Contains(all, strings.TrimSpace(string(secret))) {
		t.Fatalf("receipt secret %v, or logged", err)
	}
	if info, err := os.Stat(filepath.Join(dir, "data", "idkeeper.db."+server.StateFileName)); err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("state file beside the store: %v %v", info, err)
	}
}

// curlSession is the README's session: alloc 2, the same again, renew, remaining,
// remove, remaining. held node IDs are leased by others (dev's gateway).
func curlSession(c *client, total, held int, firstLease time.Duration) {
	c.t.Helper()
	who := `{"machineId":"demo-host","pid":4242,"startedAt":"2026-11-29T10:00:00.000Z"}`
	alloc := `{"requester":` + who + `,"count":2}`
	a := c.do("POST", "/v1/leases", alloc, 200)
	leases := a["leases"].([]any)
	if len(leases) != 2 {
		c.t.Fatalf("alloc %v", a)
	}
	now, _ := time.Parse(time.RFC3339, a["serverUtcNow"].(string))
	exp, _ := time.Parse(time.RFC3339, leases[0].(map[string]any)["expiresAt"].(string))
	if got := exp.Sub(now); got != firstLease {
		c.t.Fatalf("first lease %v, want %v", got, firstLease)
	}
	b := c.do("POST", "/v1/leases", alloc, 200)
	if fmt.Sprint(nodeIDs(b)) != fmt.Sprint(nodeIDs(a)) {
		c.t.Fatalf("idempotent alloc gave %v then %v", nodeIDs(a), nodeIDs(b))
	}
	if r := c.do("POST", "/v1/leases/renew", `{"requester":`+who+`}`, 200); len(r["leases"].([]any)) != 2 {
		c.t.Fatalf("renew %v", r)
	}
	if r := c.do("GET", "/v1/leases/remaining", "", 200); r["total"] != float64(total) || r["remaining"] != float64(total-held-2) || r["leased"] != float64(held+2) {
		c.t.Fatalf("remaining %v", r)
	}
	if r := c.do("POST", "/v1/leases/remove", `{"requester":`+who+`}`, 200); r["removed"] != 2.0 {
		c.t.Fatalf("remove %v", r)
	}
	if r := c.do("GET", "/v1/leases/remaining", "", 200); r["remaining"] != float64(total-held) {
		c.t.Fatalf("remaining after remove %v", r)
	}
	if r := c.do("POST", "/v1/leases", `{"requester":`+who+`,"count":0}`, 400); r["code"] != "INVALID_REQUEST" || r["field"] != "count" {
		c.t.Fatalf("bad count %v", r)
	}
}

func nodeIDs(resp map[string]any) []any {
	var ids []any
	for _, l := range resp["leases"].([]any) {
		ids = append(ids, l.(map[string]any)["nodeId"])
	}
	return ids
}

type client struct {
	t         *testing.T
	base, key string
}

func (c *client) do(method, path, body string, status int) map[string]any {
	c.t.Helper()
	req, _ := http.NewRequest(method, c.base+path, strings.NewReader(body))
	req.Header.Set("X-API-Key", c.key)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != status {
		c.t.Fatalf("%s %s: %d, want %d: %s", method, path, resp.StatusCode, status, raw)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		c.t.Fatalf("%s %s: %v: %s", method, path, err, raw)
	}
	return m
}

func (c *client) status(method, path string) int {
	c.t.Helper()
	req, _ := http.NewRequest(method, c.base+path, nil)
	req.Header.Set("X-API-Key", c.key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func (c *client) raw(method, path string) string {
	c.t.Helper()
	req, _ := http.NewRequest(method, c.base+path, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// scanLogs copies JSON log lines to logs and sends the address of the "listening"
// line.
func scanLogs(r io.Reader, logs io.Writer, addr chan<- string) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Bytes()
		fmt.Fprintf(logs, "%s\n", line)
		var rec struct{ Msg, Addr string }
		if json.Unmarshal(line, &rec) == nil && rec.Msg == "listening" {
			select {
			case addr <- rec.Addr:
			default:
			}
		}
	}
}

type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
	// eof, when set, is closed by the reader that fills the buffer from a
	// process's pipe once it has read the pipe to its end.
	eof chan struct{}
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// runInProcess runs run() with env vars from pairs and returns the exit status and
// what it printed.
func runInProcess(ctx context.Context, args []string, env map[string]string) (int, string, string) {
	var stdout, stderr lockedBuffer
	code := run(ctx, args, func(k string) (string, bool) { v, ok := env[k]; return v, ok }, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

func TestOutOfRangeRefusesToStart(t *testing.T) {
	cases := []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"--first-lease", "30m"}, nil, "first-lease = 30m0s is outside its range 1m0s..20m0s"},
		{[]string{"--first-lease", "0"}, nil, "first-lease = 0s is outside its range 1m0s..20m0s"},
		{nil, map[string]string{"IDKEEPER_FIRST_LEASE": "25m"}, "first-lease = 25m0s is outside its range 1m0s..20m0s"},
		{[]string{"--lease-duration", "5m"}, nil, "lease-duration = 5m0s is outside its range first-lease (10m0s)..8760h0m0s"},
		{[]string{"--lease-duration", "9000h"}, nil, "lease-duration = 9000h0m0s is outside its range first-lease (10m0s)..8760h0m0s"},
		{[]string{"--cleanup-grace", "2h"}, nil, "cleanup-grace = 2h0m0s is outside its range 0s..1h0m0s"},
		{[]string{"--cleanup-grace", "-1ns"}, nil, "cleanup-grace = -1ns is outside its range 0s..1h0m0s"},
		{[]string{"--cleanup-interval", "0"}, nil, "cleanup-interval = 0s is outside its range 1s..1h0m0s"},
		{[]string{"--cleanup-interval", "61m"}, nil, "cleanup-interval = 1h1m0s is outside its range 1s..1h0m0s"},
		{[]string{"--nodes", "5000"}, nil, "nodes = 5000 is outside its range 1..4096"},
		{nil, map[string]string{"IDKEEPER_NODES": "0"}, "nodes = 0 is outside its range 1..4096"},
		{[]string{"--nodes", "abc"}, nil, `invalid value "abc" for --nodes`},
		{nil, map[string]string{"IDKEEPER_NODES": "abc"}, `invalid value "abc" for IDKEEPER_NODES`},
		{[]string{"--log-format", "xml"}, nil, "want one of text, json"},
		{[]string{"--allowed-ips", "10.0.0.0/33"}, nil, `"10.0.0.0/33" is not a CIDR prefix`},
		{[]string{"--store", "mysql://x"}, nil, "want bolt:PATH, redis://"},
		{[]string{"--no-such-flag"}, nil, "unknown flag --no-such-flag"},
		{[]string{"extra"}, nil, "unexpected arguments"},
		{nil, map[string]string{BootstrapKeyEnv: "short"}, "IDKEEPER_BOOTSTRAP_API_KEY must be at least 24 characters"},
	}
	for _, c := range cases {
		dir := t.TempDir()
		db := filepath.Join(dir, "idkeeper.db")
		args := append([]string{"server", "--listen", "127.0.0.1:0", "--store", "bolt:" + db}, c.args...)
		code, _, stderr := runInProcess(context.Background(), args, c.env)
		if code != exitUsage || !strings.Contains(stderr, c.want) {
			t.Errorf("%v %v: exit %d, stderr %q; want exit 2 and %q", c.args, c.env, code, stderr, c.want)
		}
		if _, err := os.Stat(db); err == nil {
			t.Errorf("%v %v: the store file was created before the settings were checked", c.args, c.env)
		}
	}
	// The real binary exits non-zero with the same message.
	out, err := exec.Command(binary, "server", "--cleanup-grace", "90m").CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != exitUsage || !strings.Contains(string(out), "cleanup-grace = 1h30m0s is outside its range 0s..1h0m0s") {
		t.Fatalf("binary: %v: %s", err, out)
	}
}

func TestServerInProcess(t *testing.T) {
	t.Run("bolt", func(t *testing.T) {
		store := "bolt:" + filepath.Join(t.TempDir(), "idkeeper.db")
		initInProcess(t, store)
		serveInProcess(t, store, nil)
	})
	t.Run("redis", func(t *testing.T) {
		rs := redistest.Start(t)
		initInProcess(t, rs.URL(), "--redis-prefix=cmdtest")
		logs := serveInProcess(t, rs.URL(), func(c *client) {
			// A Redis restart without persistence loses everything, the bootstrap key
			// included. The registry's store probe finds the store empty, recovers it
			// (quarantine, raised floors) and, through Config.OnAdopt, stores the key
			// again before serving.
			rs.Restart(t)
			deadline := time.Now().Add(20 * time.Second)
			for c.status("GET", "/v1/leases/remaining") != http.StatusOK {
				if time.Now().After(deadline) {
					t.Fatal("the bootstrap key did not come back after the store reset")
				}
				time.Sleep(100 * time.Millisecond)
			}
			if r := c.do("GET", "/v1/leases/remaining", "", 200); r["quarantined"] != 4096.0 {
				t.Fatalf("after reset: %v", r)
			}
		}, "--redis-prefix=cmdtest", "--accept-lost-writes-on-redis-restart", "--state-file", filepath.Join(t.TempDir(), "state"))
		// redistest runs Redis without persistence: the server must say so.
		if !strings.Contains(logs, "redis configuration") || !strings.Contains(logs, "persists nothing") ||
			!strings.Contains(logs, "--accept-lost-writes: a routine Redis restart may lose") {
			t.Fatalf("no persistence warning:\n%s", logs)
		}
		if !strings.Contains(logs, "store reset detected") {
			t.Fatalf("no reset in the log:\n%s", logs)
		}
	})
}

// initInProcess runs idkeeper init on store.
func initInProcess(t *testing.T, store string, extra ...string) string {
	t.Helper()
	code, stdout, stderr := runInProcess(context.Background(), append([]string{"init", "--store", store}, extra...), nil)
	if code != exitOK {
		t.Fatalf("init: exit %d: %s", code, stderr)
	}
	return stdout
}

// serveInProcess runs the server command in this process, runs the README's
// session and then more (when not nil) against it, stops it through its context
// and returns its log.
func serveInProcess(t *testing.T, store string, more func(c *client), extra ...string) string {
	t.Helper()
	s, code := startInProcess(t, append([]string{"--store", store, "--cleanup-grace", "0"}, extra...), bootstrapEnv)
	if s.base == "" {
		t.Fatalf("server exited with %d:\n%s", code, s.logs)
	}
	c := s.client(bootstrapKey)
	curlSession(c, 4096, 0, 10*time.Minute)
	if more != nil {
		more(c)
	}
	if code := s.stop(); code != exitOK {
		t.Fatalf("exit %d:\n%s", code, s.logs)
	}
	return s.logs.String()
}

func TestAPIKeyCreate(t *testing.T) {
	path := filepath.Join(t.TempDir(), "k.db")
	initInProcess(t, "bolt:"+path) // only init makes a bolt store (issue #30)
	code, stdout, stderr := runInProcess(context.Background(), []string{"apikey", "create", "--store", "bolt:" + path, "--description", "deploy bot", "--expires", "2h"}, nil)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	secret := strings.TrimSpace(stdout)
	if strings.Contains(stderr, secret) {
		t.Fatal("the key went to the log")
	}
	// --expires 0: never expires.
	code, stdout, stderr = runInProcess(context.Background(), []string{"apikey", "create", "--store", "bolt:" + path, "--description", "forever", "--expires", "0"}, nil)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	forever := strings.TrimSpace(stdout)

	st, err := bolt.Open(path, bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	id, hash := idkeeper.HashAPIKey(secret)
	k, err := st.APIKey(context.Background(), id)
	if err != nil || !bytes.Equal(k.Hash, hash) || k.Description != "deploy bot" {
		t.Fatalf("stored key %+v, %v", k, err)
	}
	if d := time.Until(k.ExpiresAt); d < 119*time.Minute || d > 2*time.Hour {
		t.Fatalf("expires in %v", d)
	}
	id, _ = idkeeper.HashAPIKey(forever)
	if k, err := st.APIKey(context.Background(), id); err != nil || !k.ExpiresAt.IsZero() {
		t.Fatalf("forever key %+v, %v", k, err)
	}
	st.Close()

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"apikey"}, "want the subcommand create, list or revoke"},
		{[]string{"apikey", "delete"}, "want the subcommand create, list or revoke"},
		{[]string{"apikey", "create", "--store", "bolt:" + path, "--description", "x", "--max-nodes", "-1"}, "max-nodes = -1 is outside its range 0..4096"},
		{[]string{"apikey", "revoke", "--store", "bolt:" + path}, "want the ID of the key"},
		{[]string{"apikey", "list", "--store", "bolt:" + path, "--format", "xml"}, "want table or json"},
		{[]string{"apikey", "create", "--store", "bolt:" + path}, "--description is required"},
		{[]string{"apikey", "create", "--store", "bolt:" + path, "--description", "x", "--expires", "-1h"}, "is negative"},
	} {
		if code, _, stderr := runInProcess(context.Background(), c.args, nil); code != exitUsage || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d, %q", c.args, code, stderr)
		}
	}
}

func TestVersionAndUsage(t *testing.T) {
	code, stdout, _ := runInProcess(context.Background(), []string{"version"}, nil)
	if code != exitOK || !strings.HasPrefix(stdout, "idkeeper ") || !strings.Contains(stdout, "go1") {
		t.Fatalf("version: %d %q", code, stdout)
	}
	out, err := exec.Command(binary, "version").Output()
	if err != nil || !strings.Contains(string(out), "v9.9.9-test (commit testcommit") {
		t.Fatalf("binary version: %v %q", err, out)
	}
	if code, _, stderr := runInProcess(context.Background(), nil, nil); code != exitUsage || !strings.Contains(stderr, "Usage") {
		t.Fatalf("no args: %d %q", code, stderr)
	}
	if code, _, stderr := runInProcess(context.Background(), []string{"frobnicate"}, nil); code != exitUsage || !strings.Contains(stderr, `unknown command "frobnicate"`) {
		t.Fatalf("unknown: %d %q", code, stderr)
	}
	if code, _, stderr := runInProcess(context.Background(), []string{"server", "-h"}, nil); code != exitOK || !strings.Contains(stderr, "IDKEEPER_LEASE_DURATION") {
		t.Fatalf("server -h: %d %q", code, stderr)
	}
}
