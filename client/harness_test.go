package client_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/client"
	"github.com/idkeeper/idkeeper/client/clienttest"
	"github.com/idkeeper/idkeeper/internal/harness/registrytest"
)

// t0 is where every test's clocks start.
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

const testKey = "idk_test-key-for-the-client-tests-0123456789"

// Paths of the lease routes (DESIGN §10).
const (
	allocPath  = "/v1/leases"
	renewPath  = "/v1/leases/renew"
	removePath = "/v1/leases/remove"
)

// wait bounds every real-time wait of a test: nothing a test waits for takes long,
// so reaching it means a hang.
const wait = 10 * time.Second

// env is a real registry (bbolt store, registry engine, HTTP server) on loopback,
// behind a fault-injecting proxy. Its clock is a clienttest.Clock: the server reads
// t0 + clk.Mono() (true time), sessions read clk.Now() (their wall clock, which
// StepWall can skew without moving the server's).
type env struct {
	t     *testing.T
	clk   *clienttest.Clock
	reg   *idkeeper.Registry
	store idkeeper.Store
	proxy *proxy
	url   string
	hc    *http.Client
	logs  *syncBuffer
	fatal chan error
}

func newEnv(t *testing.T, cfg idkeeper.Config) *env {
	t.Helper()
	return newEnvOn(t, cfg, nil)
}

// newEnvOn is newEnv on the given store (a new bolt file when nil).
func newEnvOn(t *testing.T, cfg idkeeper.Config, st idkeeper.Store) *env {
	t.Helper()
	e := &env{t: t, clk: clienttest.NewClock(t0), logs: &syncBuffer{}, fatal: make(chan error, 16)}
	if cfg.CleanupInterval == 0 {
		cfg.CleanupInterval = time.Hour // tests run Cleanup themselves
	}
	srv := registrytest.Start(t, registrytest.Options{
		Config: cfg, Clock: e.serverNow, APIKey: testKey, KeyName: "client tests", Store: st,
		Wrap: func(h http.Handler) http.Handler {
			e.proxy = &proxy{next: h, faults: map[string]fault{}}
			return e.proxy
		},
	})
	e.reg, e.store, e.url, e.hc = srv.Registry, srv.Store, srv.URL, srv.Client
	return e
}

func (e *env) serverNow() time.Time { return t0.Add(e.clk.Mono()) }

var pids atomic.Int64

// requester returns a requester no other session of this test binary uses.
func requester() idkeeper.Requester {
	return idkeeper.Requester{MachineID: "client-test", PID: int(1000 + pids.Add(1)), StartedAt: t0.Add(-time.Hour)}
}

// config is a session config for this env: its clock, a fresh requester, the
// fatal handler that records into e.fatal, logs into e.logs.
func (e *env) config() client.Config {
	return client.Config{
		ServerURL:  e.url,
		APIKey:     testKey,
		HTTPClient: e.hc,
		Logger:     slog.New(slog.NewTextHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		OnFatal:    func(err error) { e.fatal <- err },
		Requester:  requester(),
		Clock:      e.clk,
	}
}

// open starts a session and closes it at the end of the test.
func (e *env) open(cfg client.Config) *client.Session {
	e.t.Helper()
	s, err := client.New(cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := s.Open(ctx); err != nil {
		e.t.Fatalf("Open: %v", err)
	}
	e.t.Cleanup(func() { s.Close() })
	return s
}

// openAsync runs Open in a goroutine; the channel receives its result.
func openAsync(s *client.Session) <-chan error {
	ch := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 4*wait)
		defer cancel()
		ch <- s.Open(ctx)
	}()
	return ch
}

// expectFatal returns the error OnFatal received, failing the test when none comes.
func (e *env) expectFatal() error {
	e.t.Helper()
	select {
	case err := <-e.fatal:
		return err
	case <-time.After(wait):
		e.t.Fatal("OnFatal was not called")
		return nil
	}
}

func (e *env) expectNoFatal() {
	e.t.Helper()
	select {
	case err := <-e.fatal:
		e.t.Fatalf("OnFatal was called: %v", err)
	default:
	}
}

// nextTimers returns the delays of the pending timers of the clock.
func (e *env) pending() []time.Duration { return e.clk.Pending() }

// proxy sits between the sessions and the server: it records every request and can
// replace the server's handling of a path with a fault.
type proxy struct {
	next   http.Handler
	mu     sync.Mutex
	faults map[string]fault
	reqs   []recorded
}

type recorded struct {
	path string
	body map[string]any
}

// fault handles a request instead of the server; next is the server.
type fault func(w http.ResponseWriter, r *http.Request, next http.Handler)

func (p *proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	var m map[string]any
	_ = json.Unmarshal(body, &m)
	p.mu.Lock()
	p.reqs = append(p.reqs, recorded{r.URL.Path, m})
	f := p.faults[r.URL.Path]
	p.mu.Unlock()
	if f != nil {
		f(w, r, p.next)
		return
	}
	p.next.ServeHTTP(w, r)
}

func (p *proxy) set(path string, f fault) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if f == nil {
		delete(p.faults, path)
		return
	}
	p.faults[path] = f
}

// requests returns the bodies of the requests sent to path, oldest first.
func (p *proxy) requests(path string) []map[string]any {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []map[string]any
	for _, r := range p.reqs {
		if r.path == path {
			out = append(out, r.body)
		}
	}
	return out
}

func (p *proxy) count(path string) int { return len(p.requests(path)) }

// drop closes the connection without an answer: a transport error.
func drop(w http.ResponseWriter, _ *http.Request, _ http.Handler) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err == nil {
		conn.Close()
	}
}

// hang never answers; the client's request timeout ends it.
func hang(_ http.ResponseWriter, r *http.Request, _ http.Handler) { <-r.Context().Done() }

// status answers with a problem+json body of the given status and code.
func status(code int, problemCode string) fault {
	return func(w http.ResponseWriter, _ *http.Request, _ http.Handler) {
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(code)
		json.NewEncoder(w).Encode(map[string]any{"status": code, "code": problemCode, "title": "injected", "detail": "injected by the test proxy"})
	}
}

// malformed answers 200 with a body that is not the contract's JSON.
func malformed(body string) fault {
	return func(w http.ResponseWriter, _ *http.Request, _ http.Handler) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		io.WriteString(w, body)
	}
}

// rewrite lets the server answer, then edits the JSON answer.
func rewrite(edit func(m map[string]any)) fault {
	return func(w http.ResponseWriter, r *http.Request, next http.Handler) {
		rec := httptest.NewRecorder()
		next.ServeHTTP(rec, r)
		var m map[string]any
		if err := json.Unmarshal(rec.Body.Bytes(), &m); err != nil || rec.Code != http.StatusOK {
			w.WriteHeader(rec.Code)
			w.Write(rec.Body.Bytes())
			return
		}
		edit(m)
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(m)
	}
}

// syncBuffer is a log sink safe for concurrent writers.
type syncBuffer struct{ registrytest.SyncBuffer }

func (b *syncBuffer) count(s string) int { return strings.Count(b.String(), s) }

// leaseOf returns the store's lease of node, failing when there is none.
func (e *env) storeLeases() []idkeeper.Lease {
	e.t.Helper()
	ls, err := e.store.Leases(context.Background())
	if err != nil {
		e.t.Fatal(err)
	}
	return ls
}

// testKeyID is the ID of testKey, the owner of the sessions' leases.
var testKeyID, _ = idkeeper.HashAPIKey(testKey)

// removeBehindBack deletes the session's leases in the store, as an operator or a
// reclaim after a long pause would, without telling the session. With zero
// mintedUpTo the watermarks stay at the leases' expiries.
func (e *env) removeBehindBack(s *client.Session) {
	e.t.Helper()
	if _, err := e.reg.Remove(context.Background(), idkeeper.RemoveRequest{Requester: s.Requester(), KeyID: testKeyID}); err != nil {
		e.t.Fatal(err)
	}
}
