package idempotency_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"

	"github.com/idkeeper/idkeeper/idempotency"
	"github.com/idkeeper/idkeeper/protocol"
)

// stats reads the records and bytes of e's store.
func (e *env) stats() (records, size int64) {
	e.Helper()
	c, ok := e.a.(idempotency.CountingStore)
	if !ok {
		e.Fatalf("%T is not a CountingStore", e.a)
	}
	records, size, err := c.Stats(e.Context())
	if err != nil {
		e.Fatal(err)
	}
	return records, size
}

// testMalformedNotStored: an answer that says the request is malformed is sent,
// not stored, and the key is free for the corrected request at once.
func testMalformedNotStored(e *env) {
	for i, status := range []int{400, 413, 415, 422} {
		e.runs.Store(0)
		e.status = firstThen(status, 200)
		h := e.handler(e.service(e.a, idempotency.Config{}))
		key := "k" + strconv.Itoa(i)
		e.wantRun(e.serve(h, post(key, `{"count":1,"pad":"malformed"}`)), status, 1)
		if r, _ := e.stats(); r != int64(i) {
			e.Fatalf("after a %d: %d records, want the %d of the earlier rounds", status, r, i)
		}
		e.wantRun(e.serve(h, post(key, `{"count":1}`)), 200, 2)
		e.wantReplay(e.serve(h, post(key, `{"count":1}`)), 200, 2)
	}
}

// testRepeatedMembers: a body that repeats a member is fingerprinted by its
// bytes, so the body of its last value is another request: 422 once the first is
// stored, not a replay of the first's answer. (The gateway refuses such a body
// with a 400 that binds the key, testBindKeyOn; this is a handler that takes it.)
func testRepeatedMembers(e *env) {
	h := e.handler(e.service(e.a, idempotency.Config{}))
	e.wantRun(e.serve(h, post("k", `{"count":1,"count":2}`)), 200, 1)
	e.wantProblem(e.serve(h, post("k", `{"count":2}`)), 422, idempotency.CodeKeyReused)
	e.wantProblem(e.serve(h, post("k", `{"count":2,"count":1}`)), 422, idempotency.CodeKeyReused)
	e.wantReplay(e.serve(h, post("k", `{"count":1,"count":2}`)), 200, 1)
	// A handler that refuses the repeat with a 400 stores nothing: the corrected
	// request runs as the first with its key.
	e.status = func(n int64) int {
		if n == 2 {
			return 400
		}
		return 200
	}
	e.wantRun(e.serve(h, post("k2", `{"count":1,"count":2}`)), 400, 2)
	e.wantRun(e.serve(h, post("k2", `{"count":2}`)), 200, 3)
	e.wantReplay(e.serve(h, post("k2", `{"count":2}`)), 200, 3)
	e.wantRuns(3)
}

// testBindKeyOn: with BindKeyOn(400), a 400 binds the key to its request in a
// record without the answer: the same request runs again and is not a replay; a
// different one is 422 without running; a 413 still frees the key; and the same
// request that the operation now accepts is 422, its answer unsent.
func testBindKeyOn(e *env) {
	s := e.service(e.a, idempotency.Config{})
	h := s.Wrap("ids.issue", nil, http.HandlerFunc(e.issue), idempotency.BindKeyOn(400))
	e.status = func(int64) int { return 400 }
	e.wantRun(e.serve(h, post("k", `{"count":1,"count":2}`)), 400, 1)
	e.wantRun(e.serve(h, post("k", `{"count":1,"count":2}`)), 400, 2)
	if r, size := e.stats(); r != 1 || size > 512 {
		e.Fatalf("%d records of %d bytes after a bound 400, want 1 without the answer", r, size)
	}
	e.wantProblem(e.serve(h, post("k", `{"count":2}`)), 422, idempotency.CodeKeyReused)
	e.wantRuns(2)

	e.status = func(int64) int { return 413 }
	e.wantRun(e.serve(h, post("k2", `{"count":3}`)), 413, 3)
	e.status = nil
	e.wantRun(e.serve(h, post("k2", `{"count":2}`)), 200, 4)

	e.wantProblem(e.serve(h, post("k", `{"count":1,"count":2}`)), 422, idempotency.CodeKeyReused)
	e.wantRuns(5)
	if r, _ := e.stats(); r != 2 {
		e.Fatalf("%d records, want the binding and the 200", r)
	}

	ctx := e.Context()
	refuse := func(context.Context) idempotency.Response { return idempotency.Response{Status: 400} }
	if _, err := s.Do(ctx, "d", "fp", refuse, idempotency.BindKeyOn(400)); err != nil {
		e.Fatal(err)
	}
	if _, err := s.Do(ctx, "d", "other", refuse); protocol.ErrorCode(err) != idempotency.CodeKeyReused {
		e.Fatalf("Do with another fingerprint after a bound 400: %v, want 422", err)
	}
	if res, err := s.Do(ctx, "d", "fp", refuse); err != nil || res.Status != 400 || res.Replayed {
		e.Fatalf("Do of the same request after a bound 400: %+v, %v; want a fresh 400", res, err)
	}
}

// testOwnHeaders: a handler's own Cache-Control is sent fresh and, when
// ReplayHeaders names it, replayed; otherwise a replay says no-store.
func testOwnHeaders(e *env) {
	own := func(s *idempotency.Service) http.Handler {
		return s.Wrap("ids.issue", nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Cache-Control", "private, max-age=60")
			e.issue(w, r)
		}))
	}
	for _, c := range []struct {
		names []string
		want  string
	}{{nil, "no-store"}, {append(slices.Clone(idempotency.DefaultReplayHeaders), "Cache-Control"), "private, max-age=60"}} {
		h := own(e.service(e.a, idempotency.Config{ReplayHeaders: c.names}))
		key := "k" + strconv.Itoa(len(c.names))
		fresh := e.serve(h, post(key, `{}`))
		replay := e.serve(h, post(key, `{}`))
		if fresh.Header().Get("Cache-Control") != "private, max-age=60" || replay.Header().Get("Cache-Control") != c.want ||
			replay.Header().Get("X-Content-Type-Options") != "nosniff" || replay.Header().Get(idempotency.HeaderReplayed) != "true" {
			e.Fatalf("ReplayHeaders %v: fresh %v, replay %v; want the replay's Cache-Control %q", c.names, fresh.Header(), replay.Header(), c.want)
		}
	}
}

// testCap: a caller holds at most MaxRecords records; a new key beyond is 429
// with Retry-After until its earliest record lapses, while its keys with records
// and other callers are answered as usual.
func testCap(e *env) {
	h := e.handler(e.service(e.a, idempotency.Config{MaxRecords: 2, TTL: time.Hour}))
	a := func(key, body string) call { c := post(key, body); c.caller = "caller-a"; return c }
	e.wantRun(e.serve(h, a("k1", `{"count":1}`)), 200, 1)
	e.clock.Advance(10 * time.Minute)
	e.wantRun(e.serve(h, a("k2", `{"count":1}`)), 200, 2)
	w := e.serve(h, a("k3", `{"count":1}`))
	e.wantProblem(w, 429, idempotency.CodeRecordsExhausted)
	var p struct{ MaxRecords, RetryAfter int }
	_ = json.Unmarshal(w.Body.Bytes(), &p)
	if w.Header().Get("Retry-After") != "3000" || p.RetryAfter != 3000 || p.MaxRecords != 2 || !jsonHeaders(w.Header()) {
		e.Fatalf("429 = %v %s; want Retry-After 3000 (k1 lapses in 50 min) and maxRecords 2", w.Header(), w.Body)
	}
	e.wantReplay(e.serve(h, a("k1", `{"count":1}`)), 200, 1)
	e.wantProblem(e.serve(h, a("k2", `{"count":9}`)), 422, idempotency.CodeKeyReused)
	b := post("k3", `{"count":1}`)
	b.caller = "caller-b"
	e.wantRun(e.serve(h, b), 200, 3)
	e.clock.Advance(50 * time.Minute) // k1 lapses
	e.wantRun(e.serve(h, a("k3", `{"count":1}`)), 200, 4)
	e.wantProblem(e.serve(h, a("k5", `{"count":1}`)), 429, idempotency.CodeRecordsExhausted)
	// Answers that are not stored take no place.
	c := func(key string) call { c := post(key, `{}`); c.caller = "caller-c"; return c }
	e.status = func(int64) int { return 503 }
	e.wantRun(e.serve(h, c("c1")), 503, 5)
	e.status = nil
	e.wantRun(e.serve(h, c("c2")), 200, 6)
	e.wantRun(e.serve(h, c("c3")), 200, 7)
	e.wantProblem(e.serve(h, c("c4")), 429, idempotency.CodeRecordsExhausted)
	e.wantRuns(7)
}

// testCapLateAnswer: a request that outlived its lock, while its caller's other
// request took the place its lapsed marker left, still stores and sends its
// answer: the cap refuses new keys, not a request that has run.
func testCapLateAnswer(e *env) {
	const lockFor = 10 * time.Second
	h := e.handler(e.service(e.a, idempotency.Config{MaxRecords: 1, LockFor: lockFor}))
	e.during = func(n int64, _ *http.Request) {
		if n == 1 {
			e.clock.Advance(lockFor)
			e.wantRun(e.serve(h, post("k2", `{"count":2}`)), 200, 2)
		}
	}
	e.wantRun(e.serve(h, post("k1", `{"count":1}`)), 200, 1)
	e.during = nil
	e.wantReplay(e.serve(h, post("k1", `{"count":1}`)), 200, 1)
	e.wantReplay(e.serve(h, post("k2", `{"count":2}`)), 200, 2)
	e.wantProblem(e.serve(h, post("k3", `{"count":3}`)), 429, idempotency.CodeRecordsExhausted)
}

// testCapDo: Do counts with OwnedBy only.
func testCapDo(e *env) {
	s := e.service(e.a, idempotency.Config{MaxRecords: 1})
	ctx := e.Context()
	op := func(context.Context) idempotency.Response { return idempotency.Response{Status: 201} }
	owner := idempotency.Owner("job-runner", "backup.create")
	if _, err := s.Do(ctx, "s1", "fp", op, idempotency.OwnedBy(owner)); err != nil {
		e.Fatal(err)
	}
	if _, err := s.Do(ctx, "s2", "fp", op, idempotency.OwnedBy(owner)); protocol.ErrorCode(err) != idempotency.CodeRecordsExhausted {
		e.Fatalf("second record of a full owner: %v", err)
	}
	for _, scope := range []string{"s2", "s3"} {
		if res, err := s.Do(ctx, scope, "fp", op); err != nil || res.Replayed {
			e.Fatalf("Do without an owner is not capped: %+v, %v", res, err)
		}
	}
}

// reverse is a toy codec: it stores the body reversed, and only bodies that
// start with '{'.
var reverse = &idempotency.Codec{
	Name: "test.reverse/1",
	Encode: func(status int, _ http.Header, body []byte) ([]byte, bool) {
		if status != 200 || !bytes.HasPrefix(body, []byte("{")) {
			return nil, false
		}
		out := slices.Clone(body)
		slices.Reverse(out)
		return out, true
	},
	Decode: func(stored []byte) ([]byte, error) {
		if !bytes.HasSuffix(stored, []byte("{")) {
			return nil, errors.New("not reversed JSON")
		}
		out := slices.Clone(stored)
		slices.Reverse(out)
		return out, nil
	},
}

// testCodec: a codec's records hold its encoding and name; replays decode them
// back byte for byte; a record of an encoding the operation does not read is 503,
// never its stored bytes.
func testCodec(e *env) {
	s := e.service(e.a, idempotency.Config{})
	h := s.Wrap("ids.issue", nil, http.HandlerFunc(e.issue), idempotency.WithCodec(reverse))
	fresh := e.serve(h, post("k", `{"count":3}`))
	e.wantRun(fresh, 200, 1)
	rec, started, err := e.a.Begin(e.Context(), idempotency.Scope("", "ids.issue", "k"), "probe", "probe", time.Minute)
	if err != nil || started {
		e.Fatalf("probe: %v, %v", started, err)
	}
	if want := []string{reverse.Name}; !slices.Equal(rec.Metadata[idempotency.HeaderEncoding], want) ||
		string(rec.Body) != `}3:"tnuoc",1:"nur"{` {
		e.Fatalf("stored record %+v; want the body reversed and the encoding named", rec)
	}
	replay := e.serve(h, post("k", `{"count":3}`))
	e.wantReplay(replay, 200, 1)
	if replay.Body.String() != fresh.Body.String() {
		e.Fatalf("replay %q, want %q", replay.Body, fresh.Body)
	}
	// A body the codec does not take is stored as it is.
	e.status = func(int64) int { return 201 }
	e.wantRun(e.serve(h, post("k2", `{"count":4}`)), 201, 2)
	e.wantReplay(e.serve(h, post("k2", `{"count":4}`)), 201, 2)
	// The same operation without the codec (an older or newer build) refuses the
	// encoded record rather than sending it.
	plain := e.handler(e.service(e.a, idempotency.Config{Logger: quiet}))
	w := e.serve(plain, post("k", `{"count":3}`))
	e.wantProblem(w, 503, protocol.CodeStoreUnavailable)
	if strings.Contains(w.Body.String(), "tnuoc") {
		e.Fatalf("the encoded record leaked: %s", w.Body)
	}
	e.wantRuns(2)
}

// testCollector: the Service's metrics show the store's records and bytes, the
// answers stored, and the refusals of the cap; they pass promlint.
func testCollector(e *env) {
	s := e.service(e.a, idempotency.Config{MaxRecords: 2})
	h := e.handler(s)
	e.wantRun(e.serve(h, post("k1", `{"count":1}`)), 200, 1)
	e.wantRun(e.serve(h, post("k2", `{"count":1}`)), 200, 2)
	e.wantProblem(e.serve(h, post("k3", `{"count":1}`)), 429, idempotency.CodeRecordsExhausted)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(s.Collector())
	got := map[string]float64{}
	mfs, err := reg.Gather()
	if err != nil {
		e.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			got[mf.GetName()] = m.GetGauge().GetValue() + m.GetCounter().GetValue()
		}
	}
	_, size := e.stats()
	if got["idkeeper_idempotency_records"] != 2 || got["idkeeper_idempotency_record_bytes"] != float64(size) || size <= 0 ||
		got["idkeeper_idempotency_records_stored_total"] != 2 || got["idkeeper_idempotency_records_exhausted_total"] != 1 {
		e.Fatalf("metrics %v; want 2 records of %d bytes, 2 stored, 1 refused", got, size)
	}
	problems, err := promlint.NewWithMetricFamilies(mfs).Lint()
	if err != nil || len(problems) > 0 {
		e.Fatalf("promlint: %v %v", problems, err)
	}
}

// countingBody is a request body that counts the bytes read from it.
type countingBody struct {
	r    *bytes.Reader
	read int
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	b.read += n
	return n, err
}

func (b *countingBody) Close() error { return nil }

// Wrap reads at most its limit: a body that declares more is refused unread, a
// body of unknown length after limit+1 bytes, and the connection is not kept for
// the rest. The MaxBody option lowers Config.MaxBody, never raises it.
func TestWrapReadsAtMostTheLimit(t *testing.T) {
	s, err := idempotency.New(newFaulty(nil), idempotency.Config{Logger: quiet, MaxBody: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	var runs int
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { runs++ })
	for _, c := range []struct {
		name   string
		opt    idempotency.Option
		limit  int
		length int64
	}{
		{"Option/Declared", idempotency.MaxBody(4096), 4096, 1 << 20},
		{"Option/Chunked", idempotency.MaxBody(4096), 4096, -1},
		{"Config/Chunked", idempotency.MaxBody(8 << 20), 1 << 20, -1},
	} {
		t.Run(c.name, func(t *testing.T) {
			body := &countingBody{r: bytes.NewReader(bytes.Repeat([]byte(" "), 2<<20))}
			r, _ := http.NewRequest(http.MethodPost, "/v1/ids", body)
			r.ContentLength = c.length
			r.Header.Set(idempotency.HeaderKey, "k-"+c.name)
			w := (&env{T: t}).serve0(s.Wrap("op", nil, ok, c.opt), r)
			(&env{T: t}).wantProblem(w, 413, protocol.CodeBodyTooLarge)
			max := c.limit + 1
			if c.length >= 0 {
				max = 0
			}
			if body.read > max || w.Header().Get("Connection") != "close" {
				t.Fatalf("read %d bytes of a 2 MiB body (at most %d), Connection %q", body.read, max, w.Header().Get("Connection"))
			}
		})
	}
	if runs != 0 {
		t.Fatalf("the handler ran %d times", runs)
	}
	// At the limit exactly, the body is read and passed on.
	body := &countingBody{r: bytes.NewReader(bytes.Repeat([]byte("x"), 4096))}
	r, _ := http.NewRequest(http.MethodPost, "/v1/ids", body)
	r.ContentLength = -1
	r.Header.Set(idempotency.HeaderKey, "k-exact")
	if w := (&env{T: t}).serve0(s.Wrap("op", nil, ok, idempotency.MaxBody(4096)), r); w.Code != 200 || runs != 1 || body.read != 4096 {
		t.Fatalf("a body of the limit: %d, %d runs, read %d", w.Code, runs, body.read)
	}
}
