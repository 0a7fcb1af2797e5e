package main

import (
	"context"
	"encoding/json"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/internal/harness/redistest"
)

// inProcess is a server command running in this process.
type inProcess struct {
	t    *testing.T
	base string
	logs *lockedBuffer
	stop func() int // stops the server and returns its exit status
}

// startInProcess runs the server command with args in this process and waits
// until it listens; env holds its environment. When the server exits before
// listening, exited holds its status and base is empty.
func startInProcess(t *testing.T, args []string, env map[string]string) (s *inProcess, exited int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	args = append([]string{"server", "--listen", "127.0.0.1:0", "--log-format", "json"}, args...)
	if slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "redis") || strings.HasPrefix(a, "postgres") }) && !slices.Contains(args, "--clock-agent") {
		// These tests are not about the clock check (clock_test.go is): a server
		// on Redis runs without an agent, as the flag allows.
		args = append(args, "--unsafe-no-clock-agent")
	}
	done := make(chan int, 1)
	go func() {
		code := run(ctx, args, func(k string) (string, bool) { v, ok := env[k]; return v, ok }, io.Discard, pw)
		pw.Close()
		done <- code
	}()
	logs := &lockedBuffer{}
	addr := make(chan string, 1)
	scanned := make(chan struct{})
	go func() { scanLogs(pr, logs, addr); close(scanned) }()
	stop := func() int {
		cancel()
		code := <-done
		<-scanned
		return code
	}
	select {
	case a := <-addr:
		s = &inProcess{t: t, base: "http://" + a, logs: logs, stop: stop}
		t.Cleanup(func() { cancel() })
		return s, 0
	case code := <-done:
		<-scanned
		cancel()
		return &inProcess{t: t, logs: logs}, code
	case <-time.After(20 * time.Second):
		cancel()
		t.Fatalf("server did not start:\n%s", logs)
		return nil, 0
	}
}

func (s *inProcess) client(key string) *client { return &client{t: s.t, base: s.base, key: key} }

var bootstrapEnv = map[string]string{BootstrapKeyEnv: bootstrapKey}

// Issue #8 item 11: durability is decided at start-up. A Redis that persists
// nothing, or runs AOF with appendfsync everysec and no replica acknowledgement,
// is refused, naming the settings and the flag that accepts them; with the flag it
// starts and /readyz says what was accepted; appendfsync always starts plainly.
func TestRedisDurabilityIsDecidedAtStart(t *testing.T) {
	for _, c := range []struct {
		name    string
		opts    []redistest.Option
		refused string // the setting the refusal names; "" when it starts
	}{
		{"no persistence", nil, "appendonly no"},
		{"aof everysec", []redistest.Option{redistest.WithAOFEverySec()}, "everysec"},
		{"aof always", []redistest.Option{redistest.WithAOF()}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			rs := redistest.Start(t, c.opts...)
			initInProcess(t, rs.URL())
			args := []string{"--store", rs.URL(), "--state-file", filepath.Join(t.TempDir(), "state")}
			s, code := startInProcess(t, args, bootstrapEnv)
			if c.refused == "" {
				if s.base == "" {
					t.Fatalf("refused to start (exit %d):\n%s", code, s.logs)
				}
				r := s.client(bootstrapKey).do("GET", "/readyz", "", 200)
				if !strings.Contains(r["durability"].(string), "appendfsync always") {
					t.Fatalf("readyz %v", r)
				}
				s.stop()
				return
			}
			if s.base != "" || code != exitFail {
				t.Fatalf("started (exit %d) on a Redis that loses writes:\n%s", code, s.logs)
			}
			if l := s.logs.String(); !strings.Contains(l, c.refused) || !strings.Contains(l, "with --accept-lost-writes") {
				t.Fatalf("the refusal does not name the setting %q and the flag:\n%s", c.refused, l)
			}
			// Issue #30: the flag, never the redis package's option (WaitReplicas).
			if l := s.logs.String(); !strings.Contains(l, "--redis-wait-replicas") || strings.Contains(l, "WaitReplicas") {
				t.Fatalf("the refusal names no --redis-wait-replicas, or a Go field:\n%s", l)
			}
			// Both names of the flag accept it: the generic one, and Redis's older one.
			flag := "--accept-lost-writes"
			if c.name == "aof everysec" {
				flag = "--accept-lost-writes-on-redis-restart"
			}
			s, _ = startInProcess(t, append(args, flag), bootstrapEnv)
			if s.base == "" {
				t.Fatalf("did not start with the flag:\n%s", s.logs)
			}
			r := s.client(bootstrapKey).do("GET", "/readyz", "", 200)
			if d, _ := r["durability"].(string); !strings.Contains(d, "accepted lost writes") || !strings.Contains(d, c.refused) {
				t.Fatalf("readyz does not show the accepted risk: %v", r)
			}
			s.stop()
		})
	}
}

// Issue #8 item 4 through the binary: a server on a store nobody initialised
// waits (503 STORE_NOT_INITIALISED, naming the command, also on /readyz), never
// initialises it, and serves once `idkeeper init` ran, its bootstrap key stored
// before the first request is answered.
func TestServerWaitsForInit(t *testing.T) {
	rs := redistest.Start(t, redistest.WithAOF())
	s, _ := startInProcess(t, []string{"--store", rs.URL(), "--state-file", filepath.Join(t.TempDir(), "state")}, bootstrapEnv)
	c := s.client(bootstrapKey)
	r := c.do("GET", "/v1/leases/remaining", "", 503)
	if r["code"] != "STORE_NOT_INITIALISED" || !strings.Contains(r["detail"].(string), "idkeeper init") {
		t.Fatalf("remaining before init: %v", r)
	}
	if r := c.do("GET", "/readyz", "", 503); r["code"] != "STORE_NOT_INITIALISED" {
		t.Fatalf("readyz before init: %v", r)
	}
	time.Sleep(6 * time.Second) // a probe or more
	if out := initInProcess(t, rs.URL()); !strings.Contains(out, "initialised redis://") || !strings.Contains(out, "generation 1") {
		t.Fatalf("init after the server waited: %q (the server initialised the store itself?)", out)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		st := c.status("GET", "/v1/leases/remaining")
		if st == 200 {
			break
		}
		if st != 503 || time.Now().After(deadline) {
			t.Fatalf("remaining after init: %d\n%s", st, s.logs)
		}
		time.Sleep(50 * time.Millisecond)
	}
	curlSession(c, 4096, 0, 10*time.Minute)
	if code := s.stop(); code != exitOK {
		t.Fatalf("exit %d", code)
	}
}

// Issue #8 item 6 through the binary: a registry restarted while Redis restarted
// without persistence finds the store empty; its state file says it saw the store,
// so it recovers it before serving (every node ID quarantined), where a registry
// without that state waits for init.
func TestRestartWhileRedisLostEverything(t *testing.T) {
	rs := redistest.Start(t)
	initInProcess(t, rs.URL())
	state := filepath.Join(t.TempDir(), "state")
	args := []string{"--store", rs.URL(), "--state-file", state, "--accept-lost-writes-on-redis-restart"}
	s, _ := startInProcess(t, args, bootstrapEnv)
	held := s.client(bootstrapKey).do("POST", "/v1/leases", `{"requester":{"machineId":"m","pid":1,"startedAt":"2026-11-30T10:00:00Z","instance":"a"},"count":3}`, 200)
	s.stop()

	rs.Restart(t) // everything is gone
	s, _ = startInProcess(t, args, bootstrapEnv)
	if !strings.Contains(s.logs.String(), "store reset detected and recovered") {
		t.Fatalf("the restarted server did not recover the store at start:\n%s", s.logs)
	}
	c := s.client(bootstrapKey)
	if r := c.do("GET", "/v1/leases/remaining", "", 200); r["quarantined"] != 4096.0 || r["remaining"] != 0.0 {
		t.Fatalf("remaining after the restart: %v", r)
	}
	// The holder shows its receipts: it keeps its leases.
	var receipts []string
	for _, l := range held["leases"].([]any) {
		receipts = append(receipts, l.(map[string]any)["receipt"].(string))
	}
	rb, _ := json.Marshal(receipts)
	r := c.do("POST", "/v1/leases/renew", `{"requester":{"machineId":"m","pid":1,"startedAt":"2026-11-30T10:00:00Z","instance":"a"},"receipts":`+string(rb)+`}`, 200)
	if len(r["leases"].([]any)) != 3 {
		t.Fatalf("renew with receipts after the reset: %v", r)
	}
	s.stop()

	rs.Restart(t)
	fresh, _ := startInProcess(t, []string{"--store", rs.URL(), "--state-file", filepath.Join(t.TempDir(), "other"),
		"--accept-lost-writes-on-redis-restart"}, bootstrapEnv)
	if r := fresh.client(bootstrapKey).do("GET", "/v1/leases/remaining", "", 503); r["code"] != "STORE_NOT_INITIALISED" {
		t.Fatalf("a server without state on the empty store: %v", r)
	}
	fresh.stop()
}

// apikey list shows what operators need (last use, quota, node IDs held, status),
// a quota exceeded answers 409 API_KEY_QUOTA_EXCEEDED, revoke refuses the key at
// once, and a new bootstrap key retires the previous one.
func TestAPIKeysThroughTheCommandLine(t *testing.T) {
	dir := t.TempDir()
	store := "bolt:" + filepath.Join(dir, "idkeeper.db")
	initInProcess(t, store)
	// A control character in a description is refused (issue #29), nothing stored.
	if code, _, stderr := runInProcess(context.Background(), []string{"apikey", "create", "--store", store, "--description", "batch\tjobs"}, nil); code == exitOK || !strings.Contains(stderr, "description") {
		t.Fatalf("a tab in the description: %d %s", code, stderr)
	}
	code, out, stderr := runInProcess(context.Background(), []string{"apikey", "create", "--store", store, "--description", "batch jobs", "--max-nodes", "2"}, nil)
	if code != exitOK {
		t.Fatalf("create: %d %s", code, stderr)
	}
	quota := strings.TrimSpace(out)
	quotaID, _ := idkeeper.HashAPIKey(quota)

	s, _ := startInProcess(t, []string{"--store", store}, bootstrapEnv)
	c := s.client(quota)
	who := func(i string) string {
		return `{"requester":{"machineId":"m","pid":1,"startedAt":"2026-11-30T10:00:00Z","instance":"` + i + `"},"count":2}`
	}
	c.do("POST", "/v1/leases", who("a"), 200)
	if r := c.do("POST", "/v1/leases", who("b"), 409); r["code"] != "API_KEY_QUOTA_EXCEEDED" || r["maxNodes"] != 2.0 {
		t.Fatalf("over the quota: %v", r)
	}
	// Another key cannot renew or remove these leases.
	other := s.client(bootstrapKey)
	if r := other.do("POST", "/v1/leases/remove", `{"requester":{"machineId":"m","pid":1,"startedAt":"2026-11-30T10:00:00Z","instance":"a"},"mintedUpTo":"2026-01-01T00:00:00Z"}`, 403); r["code"] != "LEASE_NOT_OWNED" {
		t.Fatalf("remove with another key: %v", r)
	}
	s.stop()

	code, out, _ = runInProcess(context.Background(), []string{"apikey", "list", "--store", store, "--format", "json"}, nil)
	var rows []keyRow
	if code != exitOK || json.Unmarshal([]byte(out), &rows) != nil || len(rows) != 2 {
		t.Fatalf("list: %d %s", code, out)
	}
	for _, r := range rows {
		switch r.ID {
		case quotaID:
			if r.MaxNodes != 2 || r.NodesHeld != 2 || r.LastUsedAt == nil || r.Status != "active" || r.Bootstrap {
				t.Fatalf("the quota key listed as %+v", r)
			}
		default:
			if !r.Bootstrap || r.NodesHeld != 0 {
				t.Fatalf("the bootstrap key listed as %+v", r)
			}
		}
	}
	code, out, _ = runInProcess(context.Background(), []string{"apikey", "list", "--store", store}, nil)
	if code != exitOK || !strings.Contains(out, "LAST USED") || !strings.Contains(out, "batch jobs") || !strings.Contains(out, "active (bootstrap)") {
		t.Fatalf("list table: %s", out)
	}
	if code, out, _ = runInProcess(context.Background(), []string{"apikey", "revoke", quotaID, "--store", store}, nil); code != exitOK || !strings.Contains(out, "revoked key "+quotaID) {
		t.Fatalf("revoke: %d %s", code, out)
	}

	const next = "idk_the-next-bootstrap-key-0123456789"
	s, _ = startInProcess(t, []string{"--store", store}, map[string]string{BootstrapKeyEnv: next})
	if r := s.client(quota).do("GET", "/v1/leases/remaining", "", 401); !strings.Contains(r["detail"].(string), "revoked") {
		t.Fatalf("a revoked key: %v", r)
	}
	s.client(bootstrapKey).do("GET", "/v1/leases/remaining", "", 401)
	s.client(next).do("GET", "/v1/leases/remaining", "", 200)
	if !strings.Contains(s.logs.String(), "retired the previous bootstrap API key") {
		t.Fatalf("no rotation in the log:\n%s", s.logs)
	}
	s.stop()
}
