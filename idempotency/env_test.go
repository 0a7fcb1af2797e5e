package idempotency_test

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/bolt"
	"github.com/idkeeper/idkeeper/idempotency"
	"github.com/idkeeper/idkeeper/internal/harness/fakeclock"
	"github.com/idkeeper/idkeeper/internal/harness/redistest"
	"github.com/idkeeper/idkeeper/redis"
)

var (
	t0    = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	quiet = slog.New(slog.NewTextHandler(io.Discard, nil))
)

// backend opens two handles on one new, empty store: for redis two clients, as two
// gateways would have; for bolt, which one process owns, the same handle twice.
type backend struct {
	name string
	open func(t *testing.T, clock idkeeper.Clock) (a, b idempotency.Store)
}

// backends starts what the stores need, for one top-level test.
func backends(t *testing.T) []backend {
	srv := redistest.Start(t)
	var seq atomic.Int64
	return []backend{
		{"bolt", func(t *testing.T, clock idkeeper.Clock) (idempotency.Store, idempotency.Store) {
			s, err := bolt.OpenIdempotency(filepath.Join(t.TempDir(), "idempotency.db"), bolt.Options{Clock: clock})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s, s
		}},
		{"redis", func(t *testing.T, clock idkeeper.Clock) (idempotency.Store, idempotency.Store) {
			prefix := fmt.Sprintf("svc%d", seq.Add(1))
			open := func() idempotency.Store {
				s, err := redis.OpenIdempotency(srv.URL(), redis.Options{Clock: clock, Prefix: prefix, Logger: quiet})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { s.Close() })
				return s
			}
			return open(), open()
		}},
	}
}

// env is one case's world: a store seen by two gateways, a fake clock, and an
// operation that issues numbered results and counts its runs.
type env struct {
	*testing.T
	clock  *fakeclock.Clock
	a, b   idempotency.Store
	runs   atomic.Int64
	delay  time.Duration
	status func(run int64) int              // default 200
	during func(run int64, r *http.Request) // called inside the operation
}

func newEnv(t *testing.T, be backend) *env {
	e := &env{T: t, clock: fakeclock.New(t0)}
	e.a, e.b = be.open(t, e.clock.Now)
	return e
}

func (e *env) service(store idempotency.Store, cfg idempotency.Config) *idempotency.Service {
	e.Helper()
	if cfg.Logger == nil {
		cfg.Logger = quiet
	}
	s, err := idempotency.New(store, cfg)
	if err != nil {
		e.Fatal(err)
	}
	return s
}

// issue is the operation: each run answers {"run":n,"count":…} with a status from
// e.status, a replayable Content-Type and Location and a non-replayable X-Run.
func (e *env) issue(w http.ResponseWriter, r *http.Request) {
	n := e.runs.Add(1)
	if e.during != nil {
		e.during(n, r)
	}
	if e.delay > 0 {
		time.Sleep(e.delay)
	}
	var req struct{ Count int }
	_ = json.NewDecoder(r.Body).Decode(&req)
	status := http.StatusOK
	if e.status != nil {
		status = e.status(n)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", "/v1/ids/"+strconv.FormatInt(n, 10))
	w.Header().Set("X-Run", strconv.FormatInt(n, 10))
	w.WriteHeader(status)
	fmt.Fprintf(w, `{"run":%d,"count":%d}`, n, req.Count)
}

// handler wraps issue for operation "ids.issue", the caller being X-Caller.
func (e *env) handler(s *idempotency.Service) http.Handler {
	return s.Wrap("ids.issue", func(r *http.Request) string { return r.Header.Get("X-Caller") }, http.HandlerFunc(e.issue))
}

type call struct {
	method, target, body string
	keys                 []string // Idempotency-Key field lines
	caller               string
}

func post(key, body string) call {
	c := call{method: http.MethodPost, target: "/v1/ids", body: body}
	if key != "" {
		c.keys = []string{key}
	}
	return c
}

func (e *env) serve(h http.Handler, c call) *httptest.ResponseRecorder {
	e.Helper()
	r := httptest.NewRequest(c.method, c.target, strings.NewReader(c.body))
	for _, k := range c.keys {
		r.Header.Add(idempotency.HeaderKey, k)
	}
	if c.caller != "" {
		r.Header.Set("X-Caller", c.caller)
	}
	return e.serve0(h, r)
}

// serve0 serves r as it is.
func (e *env) serve0(h http.Handler, r *http.Request) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// wantRun checks a response that ran the operation (run n) now.
func (e *env) wantRun(w *httptest.ResponseRecorder, status int, n int64) {
	e.Helper()
	if w.Code != status || w.Header().Get(idempotency.HeaderReplayed) != "" || w.Header().Get("X-Run") != strconv.FormatInt(n, 10) ||
		!jsonHeaders(w.Header()) {
		e.Fatalf("got %d %v %s; want run %d, status %d, not replayed", w.Code, w.Header(), w.Body, n, status)
	}
}

// wantReplay checks a replay of run n.
func (e *env) wantReplay(w *httptest.ResponseRecorder, status int, n int64) {
	e.Helper()
	h := w.Header()
	if w.Code != status || h.Get(idempotency.HeaderReplayed) != "true" || h.Get("X-Run") != "" ||
		h.Get("Content-Type") != "application/json" || h.Get("Location") != "/v1/ids/"+strconv.FormatInt(n, 10) ||
		!strings.HasPrefix(w.Body.String(), fmt.Sprintf(`{"run":%d,`, n)) || !jsonHeaders(h) || h.Get(idempotency.HeaderEncoding) != "" {
		e.Fatalf("got %d %v %s; want a replay of run %d with status %d", w.Code, h, w.Body, n, status)
	}
}

// jsonHeaders reports whether h has the headers every answer carries, fresh or
// replayed (see problem.SetHeaders).
func jsonHeaders(h http.Header) bool {
	return h.Get("Cache-Control") == "no-store" && h.Get("X-Content-Type-Options") == "nosniff"
}

func (e *env) wantProblem(w *httptest.ResponseRecorder, status int, code idkeeper.Code) {
	e.Helper()
	var p struct {
		Status int    `json:"status"`
		Code   string `json:"code"`
		Type   string `json:"type"`
		Title  string `json:"title"`
		Detail string `json:"detail"`
	}
	err := json.Unmarshal(w.Body.Bytes(), &p)
	if w.Code != status || err != nil || p.Status != status || p.Code != string(code) || p.Title == "" || p.Detail == "" ||
		w.Header().Get("Content-Type") != "application/problem+json" {
		e.Fatalf("got %d %v %s; want problem %d %s", w.Code, w.Header(), w.Body, status, code)
	}
	if code == idempotency.CodeInProgress && w.Header().Get("Retry-After") == "" {
		e.Fatalf("409 in progress without Retry-After")
	}
}

// firstThen answers first on the first run, then on every other.
func firstThen(first, then int) func(int64) int {
	return func(n int64) int {
		if n == 1 {
			return first
		}
		return then
	}
}

func (e *env) wantRuns(n int64) {
	e.Helper()
	if got := e.runs.Load(); got != n {
		e.Fatalf("the operation ran %d times, want %d", got, n)
	}
}
