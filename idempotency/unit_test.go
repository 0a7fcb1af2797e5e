package idempotency_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/idempotency"
	"github.com/idkeeper/idkeeper/protocol"
)

// faultyStore fails the calls named in fail and records the others on an inner
// store of one record per scope, without clock: enough for the failure paths.
type faultyStore struct {
	mu     sync.Mutex
	fail   map[string]error
	calls  []string
	marker map[string]string // scope → token
	done   map[string]*idempotency.Record
}

func newFaulty(fail map[string]error) *faultyStore {
	return &faultyStore{fail: fail, marker: map[string]string{}, done: map[string]*idempotency.Record{}}
}

func (s *faultyStore) Begin(_ context.Context, scope, fp, token string, _ time.Duration) (*idempotency.Record, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, "begin")
	if err := s.fail["begin"]; err != nil {
		return nil, false, err
	}
	if r := s.done[scope]; r != nil {
		return r, false, nil
	}
	if _, held := s.marker[scope]; held {
		return &idempotency.Record{Scope: scope, Fingerprint: fp, State: idempotency.InFlight}, false, nil
	}
	s.marker[scope] = token
	return nil, true, nil
}

func (s *faultyStore) Complete(_ context.Context, scope, token string, res idempotency.Stored, _ time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, "complete")
	if err := s.fail["complete"]; err != nil {
		return err
	}
	if s.marker[scope] != token {
		return idempotency.ErrMarkerLost
	}
	delete(s.marker, scope)
	s.done[scope] = &idempotency.Record{Scope: scope, State: idempotency.Completed, Outcome: res.Outcome, Body: res.Body}
	return nil
}

func (s *faultyStore) Abort(_ context.Context, scope, token string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, "abort")
	if s.marker[scope] == token {
		delete(s.marker, scope)
	}
	return s.fail["abort"]
}

func (s *faultyStore) trace() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Join(s.calls, ",")
}

func TestStoreFailures(t *testing.T) {
	down := errors.New("connection refused")
	ok := func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("issued")) }
	for _, c := range []struct {
		name      string
		fail      map[string]error
		wantCode  idkeeper.Code
		wantTrace string
	}{
		{"Begin", map[string]error{"begin": down}, protocol.CodeStoreUnavailable, "begin"},
		// An unstored response is not sent: a retry could otherwise get another.
		{"Complete", map[string]error{"complete": down}, protocol.CodeStoreUnavailable, "begin,complete,abort"},
		{"CompleteAndAbort", map[string]error{"complete": down, "abort": down}, protocol.CodeStoreUnavailable, "begin,complete,abort"},
	} {
		t.Run(c.name, func(t *testing.T) {
			store := newFaulty(c.fail)
			s, err := idempotency.New(store, idempotency.Config{Logger: quiet})
			if err != nil {
				t.Fatal(err)
			}
			e := &env{T: t}
			w := e.serve(s.Wrap("op", nil, http.HandlerFunc(ok)), post("k", `{}`))
			e.wantProblem(w, 503, c.wantCode)
			if w.Header().Get("Retry-After") == "" || strings.Contains(w.Body.String(), "refused") {
				t.Fatalf("503 = %v %s; want Retry-After and no internals", w.Header(), w.Body)
			}
			if got := store.trace(); got != c.wantTrace {
				t.Fatalf("store calls %s, want %s", got, c.wantTrace)
			}
		})
	}
}

func TestAbortFailureStillAnswers(t *testing.T) {
	store := newFaulty(map[string]error{"abort": errors.New("down")})
	s, _ := idempotency.New(store, idempotency.Config{Logger: quiet})
	e := &env{T: t}
	w := e.serve(s.Wrap("op", nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "upstream down", http.StatusBadGateway)
	})), post("k", `{}`))
	if w.Code != http.StatusBadGateway || store.trace() != "begin,abort" {
		t.Fatalf("got %d with store calls %s; want the handler's 502 after begin,abort", w.Code, store.trace())
	}
}

func TestRecorder(t *testing.T) {
	s, _ := idempotency.New(newFaulty(nil), idempotency.Config{Logger: quiet})
	e := &env{T: t}
	h := s.Wrap("op", nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusEarlyHints) // informational: not the result
		w.Header().Set("X-Set-Late", "1")
		w.WriteHeader(http.StatusAccepted)
		w.Header().Set("X-Too-Late", "1")
		w.WriteHeader(http.StatusInternalServerError) // superfluous
		w.Write([]byte("accepted"))
	}))
	w := e.serve(h, post("k", `{}`))
	if w.Code != http.StatusAccepted || w.Body.String() != "accepted" || w.Header().Get("X-Set-Late") != "1" ||
		w.Header().Get("X-Too-Late") != "" || w.Header().Get("Content-Length") != "8" {
		t.Fatalf("got %d %v %q", w.Code, w.Header(), w.Body)
	}
	h = s.Wrap("op", nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	if w := e.serve(h, post("k2", `{}`)); w.Code != http.StatusOK || w.Body.Len() != 0 {
		t.Fatalf("empty handler: got %d %q", w.Code, w.Body)
	}
	h = s.Wrap("op", nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	if w := e.serve(h, post("k3", `{}`)); w.Code != http.StatusNoContent || w.Header().Get("Content-Length") != "" {
		t.Fatalf("204: got %d %v", w.Code, w.Header())
	}
}

func TestNewValidates(t *testing.T) {
	store := newFaulty(nil)
	for _, cfg := range []idempotency.Config{{TTL: -time.Second}, {LockFor: time.Microsecond}, {MaxBody: -1}, {MaxRecords: -1},
		{MaxRecords: 10}, // the store does not count records
		{ReplayHeaders: []string{"Bad Name"}}, {ReplayHeaders: []string{idempotency.HeaderEncoding}}} {
		if _, err := idempotency.New(store, cfg); err == nil {
			t.Errorf("New(%+v) accepted", cfg)
		}
	}
	if _, err := idempotency.New(nil, idempotency.Config{}); err == nil {
		t.Error("New without a store accepted")
	}
	s, err := idempotency.New(store, idempotency.Config{})
	if err != nil || s.TTL() != 24*time.Hour || s.Required() {
		t.Fatalf("New with the zero Config = TTL %v, required %v, %v; want 24h, optional", s.TTL(), s.Required(), err)
	}
}

func TestWrapRejectsBadOperation(t *testing.T) {
	s, _ := idempotency.New(newFaulty(nil), idempotency.Config{})
	for _, op := range []string{"", "has space", strings.Repeat("o", idempotency.MaxOperationLen+1)} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Wrap(%q) did not panic", op)
				}
			}()
			s.Wrap(op, nil, http.NotFoundHandler())
		}()
	}
}

func TestReplayable(t *testing.T) {
	for status, want := range map[int]bool{200: true, 201: true, 204: true, 303: true, 401: true, 403: true, 404: true,
		409: true, 410: true, 412: true, 408: false, 425: false, 429: false, 500: false, 502: false, 503: false,
		// Malformed requests: the same request gets the same answer without a record.
		400: false, 411: false, 413: false, 414: false, 415: false, 422: false, 431: false} {
		if idempotency.Replayable(status) != want {
			t.Errorf("Replayable(%d) = %v, want %v", status, !want, want)
		}
	}
}
