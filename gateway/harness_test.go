package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/client"
	"github.com/idkeeper/idkeeper/gateway"
	"github.com/idkeeper/idkeeper/internal/harness/registrytest"
	"github.com/prometheus/client_golang/prometheus"
)

var _ gateway.IDSource = (*client.Session)(nil)

// t0 is where fake clocks start.
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

const registryKey = "idk_gateway-tests-registry-key-0123456789"

var quiet = slog.New(slog.DiscardHandler)

// registry is a real registry server (bbolt store, registry engine, HTTP API) on
// loopback.
type registry struct {
	url string
	hc  *http.Client
	reg *idkeeper.Registry
}

// startRegistry starts a registry whose clock is clock (the system clock when nil).
func startRegistry(t testing.TB, clock func() time.Time) *registry {
	t.Helper()
	srv := registrytest.Start(t, registrytest.Options{
		Config: idkeeper.Config{CleanupInterval: time.Hour}, Clock: clock, Logger: quiet,
		APIKey: registryKey, KeyName: "gateway tests",
	})
	return &registry{url: srv.URL, hc: srv.Client, reg: srv.Registry}
}

var pids atomic.Int64

// requester returns a requester no other session of this test binary uses.
func requester() idkeeper.Requester {
	return idkeeper.Requester{MachineID: "gateway-test", PID: int(1000 + pids.Add(1)), StartedAt: t0.Add(-time.Hour)}
}

// config is a session config for this registry: count node IDs, a fresh
// requester, OnFatal recording into fatal (which may be nil: then the test fails).
func (r *registry) config(t testing.TB, count int, fatal chan<- error) client.Config {
	return client.Config{
		ServerURL: r.url, APIKey: registryKey, Count: count, HTTPClient: r.hc, Logger: quiet, Requester: requester(),
		OnFatal: func(err error) {
			if fatal == nil {
				t.Errorf("the session lost its lease: %v", err)
				return
			}
			fatal <- err
		},
	}
}

// open starts a session of count node IDs on the system clock, closed at the end
// of the test.
func (r *registry) open(t testing.TB, count int) *client.Session {
	t.Helper()
	return openSession(t, r.config(t, count, nil))
}

func openSession(t testing.TB, cfg client.Config) *client.Session {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := client.Start(ctx, cfg)
	if err != nil {
		t.Fatalf("client.Start: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// newGateway is gateway.New for options that are valid.
func newGateway(t testing.TB, src gateway.IDSource, opts gateway.Options) *gateway.Server {
	t.Helper()
	srv, err := gateway.New(src, opts)
	if err != nil {
		t.Fatalf("gateway.New: %v", err)
	}
	return srv
}

// gw is a gateway served on loopback.
type gw struct {
	t   testing.TB
	srv *gateway.Server
	url string
	hc  *http.Client
}

func startGateway(t testing.TB, src gateway.IDSource, opts gateway.Options) *gw {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = quiet
	}
	if opts.Gatherer == nil {
		pr := prometheus.NewRegistry()
		opts.Registerer, opts.Gatherer = pr, pr
	}
	srv := newGateway(t, src, opts)
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	hc := ts.Client()
	hc.Transport.(*http.Transport).MaxIdleConnsPerHost = 64
	return &gw{t: t, srv: srv, url: ts.URL, hc: hc}
}

// answer is one response, read whole.
type answer struct {
	status int
	header http.Header
	body   []byte
}

// do sends a request; header holds name, value pairs. A POST gets Content-Type
// application/json unless header sets one.
func (g *gw) do(method, path, body string, header ...string) answer {
	g.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, g.url+path, rd)
	if err != nil {
		g.t.Fatal(err)
	}
	if method == http.MethodPost {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := g.hc.Do(req)
	if err != nil {
		g.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		g.t.Fatalf("%s %s: reading the body: %v", method, path, err)
	}
	return answer{status: resp.StatusCode, header: resp.Header, body: b}
}

func (g *gw) post(body string, header ...string) answer {
	return g.do(http.MethodPost, "/v1/ids", body, header...)
}

func (g *gw) get(path string, header ...string) answer {
	return g.do(http.MethodGet, path, "", header...)
}

// ids decodes a 200 issuance answer in either format, failing the test otherwise.
func (a answer) ids(t testing.TB) []int64 {
	t.Helper()
	if a.status != http.StatusOK {
		t.Fatalf("status %d, want 200: %s", a.status, a.body)
	}
	if ct := a.header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("Content-Type %q", ct)
	}
	var v struct{ IDs []json.RawMessage }
	dec := json.NewDecoder(bytes.NewReader(a.body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("body %s: %v", a.body, err)
	}
	out := make([]int64, len(v.IDs))
	for i, raw := range v.IDs {
		s := string(raw)
		if len(s) >= 2 && s[0] == '"' {
			s = s[1 : len(s)-1]
		}
		if err := json.Unmarshal([]byte(s), &out[i]); err != nil {
			t.Fatalf("ID %s: %v", raw, err)
		}
	}
	return out
}

// problem decodes a problem+json answer and checks its status and code.
func (a answer) problem(t testing.TB, status int, code idkeeper.Code) map[string]any {
	t.Helper()
	if a.status != status {
		t.Fatalf("status %d, want %d: %s", a.status, status, a.body)
	}
	if ct := a.header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("Content-Type %q, want application/problem+json: %s", ct, a.body)
	}
	var p map[string]any
	if err := json.Unmarshal(a.body, &p); err != nil {
		t.Fatalf("problem body %s: %v", a.body, err)
	}
	if p["code"] != string(code) || p["status"] != float64(status) || p["title"] == "" || p["detail"] == "" {
		t.Fatalf("problem %v, want code %s", p, code)
	}
	return p
}

// checkAscending fails unless ids are strictly ascending.
func checkAscending(t testing.TB, ids []int64) {
	t.Helper()
	for i := 1; i < len(ids); i++ {
		if ids[i] <= ids[i-1] {
			t.Fatalf("IDs not strictly ascending at %d: %d after %d", i, ids[i], ids[i-1])
		}
	}
}

// spy wraps a source, records every chunk it mints, and can fail chosen chunks
// after the real source minted them, so those IDs are truly used up.
type spy struct {
	gateway.IDSource
	mu     sync.Mutex
	calls  int
	sizes  []int
	minted []int64 // every ID the source minted, handed out or not
	fail   func(call int) error
}

var errInjected = errors.New("injected chunk failure")

func (s *spy) NextIDs(dst []int64) error {
	s.mu.Lock()
	s.calls++
	call := s.calls
	s.sizes = append(s.sizes, len(dst))
	fail := s.fail
	s.mu.Unlock()
	err := s.IDSource.NextIDs(dst)
	if err == nil {
		s.mu.Lock()
		s.minted = append(s.minted, dst...)
		s.mu.Unlock()
		if fail != nil {
			err = fail(call)
		}
	}
	return err
}

func (s *spy) reset() (calls int, sizes []int, minted []int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	calls, sizes, minted = s.calls, s.sizes, s.minted
	s.calls, s.sizes, s.minted = 0, nil, nil
	slices.Sort(sizes)
	return calls, sizes, minted
}
