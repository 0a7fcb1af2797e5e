package http_test

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/bolt"
	idkhttp "github.com/idkeeper/idkeeper/http"
	"github.com/idkeeper/idkeeper/internal/harness/fakeclock"
	"github.com/idkeeper/idkeeper/internal/harness/redistest"
	"github.com/idkeeper/idkeeper/internal/harness/registrytest"
	"github.com/idkeeper/idkeeper/internal/problem"
	"github.com/idkeeper/idkeeper/internal/wire"
	"github.com/idkeeper/idkeeper/protocol"
	"github.com/idkeeper/idkeeper/redis"
)

// start is the fake clock's start in every test: lease arithmetic never sleeps.
var start = time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)

// testKey is the API key every harness stores.
const testKey = "idk_test-key-0123456789abcdefghijklmnop"

// harness is a registry served over real HTTP on loopback.
type harness struct {
	t       testing.TB
	clk     *fakeclock.Clock
	store   idkeeper.Store
	reg     *idkeeper.Registry
	srv     *httptest.Server
	prom    *prometheus.Registry
	logs    *syncBuffer
	redis   *redistest.Server // nil on bolt
	client  *http.Client
	apiKey  string
	baseURL string
}

// setup adjusts a harness before it starts.
type setup struct {
	cfg  idkeeper.Config
	opts idkhttp.Options
}

type option func(*setup)

func withConfig(f func(*idkeeper.Config)) option { return func(s *setup) { f(&s.cfg) } }
func withOptions(f func(*idkhttp.Options)) option {
	return func(s *setup) { f(&s.opts) }
}

// newBolt serves a registry on a bolt file in t.TempDir().
func newBolt(t testing.TB, opts ...option) *harness {
	t.Helper()
	clk := fakeclock.New(start)
	st, err := bolt.Open(filepath.Join(t.TempDir(), "idkeeper.db"), bolt.Options{Clock: clk.Now, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	return newHarness(t, clk, st, nil, opts...)
}

// newRedis serves a registry on a private redis-server (internal/harness/redistest).
func newRedis(t testing.TB, opts ...option) *harness {
	t.Helper()
	clk := fakeclock.New(start)
	rs := redistest.Start(t)
	st, err := redis.Open(rs.URL(), redis.Options{Clock: clk.Now, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	return newHarness(t, clk, st, rs, opts...)
}

// stores runs f once per store, as subtests named after it.
func stores(t *testing.T, f func(t *testing.T, h *harness), opts ...option) {
	t.Run("bolt", func(t *testing.T) { f(t, newBolt(t, opts...)) })
	t.Run("redis", func(t *testing.T) { f(t, newRedis(t, opts...)) })
}

// newHarnessNoInit serves a registry on a bolt file nobody initialised: it waits
// for `idkeeper init`.
func newHarnessNoInit(t testing.TB) *harness {
	t.Helper()
	clk := fakeclock.New(start)
	st, err := bolt.Open(filepath.Join(t.TempDir(), "idkeeper.db"), bolt.Options{Clock: clk.Now, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	return newHarnessWith(t, clk, st, nil, true)
}

func newHarness(t testing.TB, clk *fakeclock.Clock, st idkeeper.Store, rs *redistest.Server, opts ...option) *harness {
	t.Helper()
	return newHarnessWith(t, clk, st, rs, false, opts...)
}

func newHarnessWith(t testing.TB, clk *fakeclock.Clock, st idkeeper.Store, rs *redistest.Server, noInit bool, opts ...option) *harness {
	t.Helper()
	logs := &syncBuffer{}
	log := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	s := setup{opts: idkhttp.Options{Version: "v1.2.3", Commit: "abc123"}}
	for _, o := range opts {
		o(&s)
	}
	prom := prometheus.NewRegistry()
	metrics := idkhttp.NewMetrics(prom)
	s.cfg.Logger, s.cfg.Observer = log, metrics
	s.opts.Gatherer, s.opts.Metrics = prom, metrics
	srv := registrytest.Start(t, registrytest.Options{
		Config: s.cfg, Store: st, Clock: clk.Now, APIKey: testKey, KeyName: "test", HTTP: s.opts, NoInit: noInit,
		Opened: func(reg *idkeeper.Registry) { metrics.CollectPool(reg) },
	})
	return &harness{t: t, clk: clk, store: st, reg: srv.Registry, srv: srv.HTTP, prom: prom, logs: logs, redis: rs,
		client: srv.Client, apiKey: testKey, baseURL: srv.URL}
}

// response is one HTTP answer, its JSON body decoded.
type response struct {
	status int
	header http.Header
	raw    []byte
	body   map[string]any
}

// call sends a request with the harness's API key; a non-empty body goes as
// application/json. hdr adds or, with an empty value, removes headers.
func (h *harness) call(method, path, body string, hdr ...string) response {
	h.t.Helper()
	req, err := http.NewRequest(method, h.baseURL+path, strings.NewReader(body))
	if err != nil {
		h.t.Fatal(err)
	}
	req.Header.Set("X-API-Key", h.apiKey)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i+1] == "" {
			req.Header.Del(hdr[i])
		} else {
			req.Header.Set(hdr[i], hdr[i+1])
		}
	}
	resp, err := h.client.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		h.t.Fatal(err)
	}
	r := response{status: resp.StatusCode, header: resp.Header, raw: raw}
	if len(raw) > 0 && method != http.MethodHead && strings.Contains(resp.Header.Get("Content-Type"), "json") {
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber()
		if err := dec.Decode(&r.body); err != nil {
			h.t.Fatalf("%s %s: body is not a JSON object: %v: %q", method, path, err, raw)
		}
	}
	return r
}

func (h *harness) post(path, body string, hdr ...string) response {
	h.t.Helper()
	return h.call(http.MethodPost, path, body, hdr...)
}

func (h *harness) get(path string, hdr ...string) response {
	h.t.Helper()
	return h.call(http.MethodGet, path, "", hdr...)
}

// ok asserts a 200 application/json answer.
func (r response) ok(t testing.TB) response {
	t.Helper()
	if r.status != http.StatusOK {
		t.Fatalf("status %d, want 200: %s", r.status, r.raw)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("Content-Type %q", ct)
	}
	return r
}

// problem asserts a problem+json answer with the code's status and returns it.
func (r response) problem(t testing.TB, code idkeeper.Code) response {
	t.Helper()
	want, _ := problem.Lookup(code)
	if r.status != want.Status {
		t.Fatalf("status %d, want %d (%s): %s", r.status, want.Status, code, r.raw)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("Content-Type %q, want application/problem+json: %s", ct, r.raw)
	}
	if got := r.str("code"); got != string(code) {
		t.Fatalf("code %q, want %q: %s", got, code, r.raw)
	}
	wantType := "https://idkeeper.dev/problems/" + strings.ReplaceAll(strings.ToLower(string(code)), "_", "-")
	if r.str("type") != wantType || r.str("title") == "" || r.str("detail") == "" || r.num("status") != int64(want.Status) {
		t.Fatalf("incomplete problem body: %s", r.raw)
	}
	if code == protocol.CodeStoreUnavailable || code == protocol.CodeNotReady {
		if r.header.Get("Retry-After") == "" {
			t.Fatalf("503 without Retry-After")
		}
	}
	return r
}

func (r response) str(name string) string {
	s, _ := r.body[name].(string)
	return s
}

func (r response) num(name string) int64 {
	n, ok := r.body[name].(json.Number)
	if !ok {
		return -1 << 63
	}
	v, _ := n.Int64()
	return v
}

// lease is one element of a "leases" array.
type lease struct {
	NodeID       int    `json:"nodeId"`
	NotBefore    string `json:"notBefore"`
	ExpiresAt    string `json:"expiresAt"`
	FencingToken uint64 `json:"fencingToken"`
	Receipt      string `json:"receipt"`
}

func (r response) leases(t testing.TB) []lease {
	t.Helper()
	var v struct {
		Leases []lease `json:"leases"`
	}
	if err := json.Unmarshal(r.raw, &v); err != nil || v.Leases == nil {
		t.Fatalf("no leases array: %v: %s", err, r.raw)
	}
	return v.Leases
}

// ts renders t the way the API does.
func ts(t time.Time) string { return wire.FormatTime(t) }

// requesterJSON is a requester member for pid.
func requesterJSON(pid int) string {
	return `{"machineId":"host-a","pid":` + strconv.Itoa(pid) + `,"startedAt":"2026-03-01T09:00:00.000Z"}`
}

func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// syncBuffer is a log sink that tests may read while the server writes.
type syncBuffer = registrytest.SyncBuffer
