package idempotency_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper/idempotency"
	"github.com/idkeeper/idkeeper/protocol"
)

func TestService(t *testing.T) {
	cases := []struct {
		name string
		fn   func(e *env)
	}{
		{"Concurrent50", testConcurrent50},
		{"Replay", testReplay},
		{"ChangedBody", testChangedBody},
		{"CanonicalBody", testCanonicalBody},
		{"QueryInFingerprint", testQueryInFingerprint},
		{"RequiredMissing", testRequiredMissing},
		{"OptionalMissing", testOptionalMissing},
		{"InvalidKey", testInvalidKey},
		{"QuotedAndBareKey", testQuotedAndBareKey},
		{"ScopeCallerOperation", testScope},
		{"TTL", testTTL},
		{"ConfiguredTTL", testConfiguredTTL},
		{"CrashedMarkerLapses", testCrashedMarker},
		{"ServerErrorNotStored", testServerErrorNotStored},
		{"ClientErrorStored", testClientErrorStored},
		{"TooManyRequestsNotStored", testTooManyRequestsNotStored},
		{"PanicFreesKey", testPanicFreesKey},
		{"LateAnswerYieldsToNewer", testLateAnswerYields},
		{"LateAnswerStoredWhenFree", testLateAnswerStored},
		{"TwoGateways", testTwoGateways},
		{"SafeMethods", testSafeMethods},
		{"BodyTooLarge", testBodyTooLarge},
		{"Do", testDo},
		{"LockForOption", testLockForOption},
		{"MalformedNotStored", testMalformedNotStored},
		{"RepeatedMembers", testRepeatedMembers},
		{"BindKeyOn", testBindKeyOn},
		{"OwnHeaders", testOwnHeaders},
		{"Cap", testCap},
		{"CapLateAnswer", testCapLateAnswer},
		{"CapDo", testCapDo},
		{"Codec", testCodec},
		{"Collector", testCollector},
	}
	for _, be := range backends(t) {
		t.Run(be.name, func(t *testing.T) {
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) { c.fn(newEnv(t, be)) })
			}
		})
	}
}

// testConcurrent50 sends 50 requests with one key at once over HTTP: the operation
// runs once; every other request gets its response replayed, or 409. A second
// wave, after the first has ended, gets 50 replays.
func testConcurrent50(e *env) {
	const n = 50
	e.delay = 20 * time.Millisecond
	srv := httptest.NewServer(e.handler(e.service(e.a, idempotency.Config{Required: true})))
	defer srv.Close()
	first, replays, conflicts := e.wave(srv, n)
	e.wantRuns(1)
	if first != 1 || replays+conflicts != n-1 {
		e.Fatalf("%d first answers, %d replays, %d conflicts; want 1 and %d others", first, replays, conflicts, n-1)
	}
	e.Logf("first wave: 1 issuance, %d replays, %d conflicts", replays, conflicts)
	if first, replays, _ := e.wave(srv, n); first != 0 || replays != n {
		e.Fatalf("second wave: %d issuances, %d replays; want 0 and %d", first, replays, n)
	}
	e.wantRuns(1)
}

// wave sends n concurrent requests with one key and counts the answers: the
// first (ran now), replays of run 1, and 409s. Anything else fails the test.
func (e *env) wave(srv *httptest.Server, n int) (first, replays, conflicts int) {
	e.Helper()
	type answer struct {
		status   int
		replayed string
		body     string
		code     string
	}
	var (
		wg      sync.WaitGroup
		start   = make(chan struct{})
		answers = make([]answer, n)
	)
	for i := range n {
		wg.Go(func() {
			<-start
			req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/ids", strings.NewReader(`{"count":3}`))
			req.Header.Set(idempotency.HeaderKey, "0b6a6f0e-5d8c-4b5e-9a37-1f1c2b7d9e10")
			resp, err := srv.Client().Do(req)
			if err != nil {
				e.Errorf("request %d: %v", i, err)
				return
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			var p struct{ Code string }
			_ = json.Unmarshal(b, &p)
			answers[i] = answer{resp.StatusCode, resp.Header.Get(idempotency.HeaderReplayed), string(b), p.Code}
		})
	}
	close(start)
	wg.Wait()
	const issued = `{"run":1,"count":3}`
	for i, a := range answers {
		switch {
		case a.status == 200 && a.replayed == "" && a.body == issued:
			first++
		case a.status == 200 && a.replayed == "true" && a.body == issued:
			replays++
		case a.status == 409 && a.code == string(idempotency.CodeInProgress):
			conflicts++
		default:
			e.Errorf("answer %d: %+v", i, a)
		}
	}
	if e.Failed() {
		e.FailNow()
	}
	return first, replays, conflicts
}

func testReplay(e *env) {
	e.status = func(int64) int { return http.StatusCreated }
	h := e.handler(e.service(e.a, idempotency.Config{}))
	e.wantRun(e.serve(h, post("k1", `{"count":2}`)), 201, 1)
	for range 3 {
		e.clock.Advance(time.Hour)
		e.wantReplay(e.serve(h, post("k1", `{"count":2}`)), 201, 1)
	}
	e.wantRuns(1)
}

func testChangedBody(e *env) {
	h := e.handler(e.service(e.a, idempotency.Config{}))
	e.wantRun(e.serve(h, post("k1", `{"count":2}`)), 200, 1)
	e.wantProblem(e.serve(h, post("k1", `{"count":3}`)), 422, idempotency.CodeKeyReused)
	e.wantProblem(e.serve(h, post("k1", ``)), 422, idempotency.CodeKeyReused)
	// While the first request with a key runs, another body is still a reuse.
	e.during = func(n int64, _ *http.Request) {
		if n == 2 {
			e.wantProblem(e.serve(h, post("k2", `{"count":9}`)), 422, idempotency.CodeKeyReused)
			e.wantProblem(e.serve(h, post("k2", `{"count":1}`)), 409, idempotency.CodeInProgress)
		}
	}
	e.wantRun(e.serve(h, post("k2", `{"count":1}`)), 200, 2)
	e.wantRuns(2)
}

func testCanonicalBody(e *env) {
	h := e.handler(e.service(e.a, idempotency.Config{}))
	e.wantRun(e.serve(h, post("k", `{"count":2,"format":"string","opts":{"a":1,"b":[1,2]}}`)), 200, 1)
	for _, body := range []string{
		`{"opts":{"b":[1,2],"a":1},"format":"string","count":2}`,
		"\n{ \"count\" : 2,\n\t\"format\":\"string\", \"opts\": { \"b\": [ 1 , 2 ], \"a\": 1 } }\n",
	} {
		e.wantReplay(e.serve(h, post("k", body)), 200, 1)
	}
	for _, body := range []string{
		`{"count":2,"format":"string","opts":{"a":1,"b":[2,1]}}`,
		`{"count":2.0,"format":"string","opts":{"a":1,"b":[1,2]}}`,
		`{"count":2,"format":"string"}`,
	} {
		e.wantProblem(e.serve(h, post("k", body)), 422, idempotency.CodeKeyReused)
	}
	e.wantRuns(1)
}

func testQueryInFingerprint(e *env) {
	h := e.handler(e.service(e.a, idempotency.Config{}))
	c := post("k", `{"count":1}`)
	c.target = "/v1/ids?format=string&x=1"
	e.wantRun(e.serve(h, c), 200, 1)
	c.target = "/v1/ids?x=1&format=string"
	e.wantReplay(e.serve(h, c), 200, 1)
	c.target = "/v1/ids"
	e.wantProblem(e.serve(h, c), 422, idempotency.CodeKeyReused)
}

func testRequiredMissing(e *env) {
	h := e.handler(e.service(e.a, idempotency.Config{Required: true}))
	e.wantProblem(e.serve(h, post("", `{"count":1}`)), 400, idempotency.CodeKeyRequired)
	e.wantRuns(0)
}

// testOptionalMissing: without a key the request goes to the handler untouched.
func testOptionalMissing(e *env) {
	h := e.handler(e.service(e.a, idempotency.Config{}))
	for n := range int64(2) {
		w := e.serve(h, post("", `{"count":1}`))
		if w.Code != 200 || w.Header().Get("X-Run") != strconv.FormatInt(n+1, 10) || w.Header().Get(idempotency.HeaderReplayed) != "" {
			e.Fatalf("request %d without a key: %d %v", n+1, w.Code, w.Header())
		}
	}
}

func testInvalidKey(e *env) {
	for _, required := range []bool{false, true} {
		h := e.handler(e.service(e.a, idempotency.Config{Required: required}))
		for _, keys := range [][]string{
			{""}, {`""`}, {`"abc`}, {`"a\nb"`}, {`"abc";x=1`}, {"a b"}, {"a,b"}, {"ключ"},
			{strings.Repeat("k", 256)}, {"k1", "k2"},
		} {
			c := post("", `{}`)
			c.keys = keys
			e.wantProblem(e.serve(h, c), 400, idempotency.CodeKeyInvalid)
		}
	}
	e.wantRuns(0)
}

func testQuotedAndBareKey(e *env) {
	h := e.handler(e.service(e.a, idempotency.Config{}))
	e.wantRun(e.serve(h, post(`"abc-123"`, `{}`)), 200, 1)
	e.wantReplay(e.serve(h, post(`abc-123`, `{}`)), 200, 1)
	e.wantReplay(e.serve(h, post(` "abc-123"	`, `{}`)), 200, 1)
	e.wantRun(e.serve(h, post(`"a\"b\\c d"`, `{}`)), 200, 2)
	e.wantReplay(e.serve(h, post(`"a\"b\\c d"`, `{}`)), 200, 2)
}

func testScope(e *env) {
	s := e.service(e.a, idempotency.Config{})
	h := e.handler(s)
	other := s.Wrap("ids.other", nil, http.HandlerFunc(e.issue))
	c := post("k", `{"count":1}`)
	c.caller = "key-a"
	e.wantRun(e.serve(h, c), 200, 1)
	e.wantReplay(e.serve(h, c), 200, 1)
	c.caller = "key-b"
	e.wantRun(e.serve(h, c), 200, 2)
	e.wantRun(e.serve(other, c), 200, 3)
	e.wantReplay(e.serve(other, c), 200, 3)
}

func testTTL(e *env) {
	h := e.handler(e.service(e.a, idempotency.Config{}))
	e.wantRun(e.serve(h, post("k", `{}`)), 200, 1)
	e.clock.Advance(idempotency.DefaultTTL - time.Millisecond)
	e.wantReplay(e.serve(h, post("k", `{}`)), 200, 1)
	e.clock.Advance(time.Millisecond)
	e.wantRun(e.serve(h, post("k", `{"count":5}`)), 200, 2)
	e.wantReplay(e.serve(h, post("k", `{"count":5}`)), 200, 2)
}

func testConfiguredTTL(e *env) {
	h := e.handler(e.service(e.a, idempotency.Config{TTL: time.Hour}))
	e.wantRun(e.serve(h, post("k", `{}`)), 200, 1)
	e.clock.Advance(time.Hour - time.Millisecond)
	e.wantReplay(e.serve(h, post("k", `{}`)), 200, 1)
	e.clock.Advance(time.Millisecond)
	e.wantRun(e.serve(h, post("k", `{}`)), 200, 2)
}

// testCrashedMarker: a gateway claimed the key and died before storing a result;
// the key is locked for LockFor, then the retry runs.
func testCrashedMarker(e *env) {
	const lockFor = 30 * time.Second
	h := e.handler(e.service(e.a, idempotency.Config{LockFor: lockFor}))
	scope := idempotency.Scope("", "ids.issue", "k")
	fp := idempotency.Fingerprint(http.MethodPost, "/v1/ids", []byte(`{"count":1}`))
	if _, started, err := e.b.Begin(e.Context(), scope, fp, "crashed-gateway", lockFor); err != nil || !started {
		e.Fatalf("Begin of the crashed gateway: %v, %v", started, err)
	}
	e.wantProblem(e.serve(h, post("k", `{"count":1}`)), 409, idempotency.CodeInProgress)
	e.clock.Advance(lockFor - time.Millisecond)
	e.wantProblem(e.serve(h, post("k", `{"count":1}`)), 409, idempotency.CodeInProgress)
	e.clock.Advance(time.Millisecond)
	e.wantRun(e.serve(h, post("k", `{"count":1}`)), 200, 1)
	if err := e.b.Complete(e.Context(), scope, "crashed-gateway", idempotency.Stored{Outcome: 200}, time.Hour); err == nil {
		e.Fatal("the crashed gateway's marker completed after another took the key over")
	}
	e.wantReplay(e.serve(h, post("k", `{"count":1}`)), 200, 1)
}

func testServerErrorNotStored(e *env) {
	e.status = firstThen(503, 200)
	h := e.handler(e.service(e.a, idempotency.Config{}))
	e.wantRun(e.serve(h, post("k", `{}`)), 503, 1)
	e.wantRun(e.serve(h, post("k", `{}`)), 200, 2)
	e.wantReplay(e.serve(h, post("k", `{}`)), 200, 2)
}

func testClientErrorStored(e *env) {
	e.status = firstThen(409, 200)
	h := e.handler(e.service(e.a, idempotency.Config{}))
	e.wantRun(e.serve(h, post("k", `{}`)), 409, 1)
	e.wantReplay(e.serve(h, post("k", `{}`)), 409, 1)
	e.wantRuns(1)
}

func testTooManyRequestsNotStored(e *env) {
	e.status = firstThen(429, 200)
	h := e.handler(e.service(e.a, idempotency.Config{}))
	e.wantRun(e.serve(h, post("k", `{}`)), 429, 1)
	e.wantRun(e.serve(h, post("k", `{}`)), 200, 2)
}

func testPanicFreesKey(e *env) {
	e.during = func(n int64, _ *http.Request) {
		if n == 1 {
			panic(http.ErrAbortHandler)
		}
	}
	h := e.handler(e.service(e.a, idempotency.Config{}))
	func() {
		defer func() {
			if p := recover(); p != http.ErrAbortHandler {
				e.Fatalf("recovered %v, want the handler's panic", p)
			}
		}()
		e.serve(h, post("k", `{}`))
	}()
	e.wantRun(e.serve(h, post("k", `{}`)), 200, 2)
}

// testLateAnswerYields: the first request outlives its lock; a retry on another
// gateway takes the key over and answers. The late one then sends that answer,
// not its own: the client never sees two.
func testLateAnswerYields(e *env) {
	const lockFor = 10 * time.Second
	other := e.handler(e.service(e.b, idempotency.Config{LockFor: lockFor}))
	var retry *httptest.ResponseRecorder
	e.during = func(n int64, _ *http.Request) {
		if n == 1 {
			e.clock.Advance(lockFor)
			retry = e.serve(other, post("k", `{}`))
		}
	}
	first := e.serve(e.handler(e.service(e.a, idempotency.Config{LockFor: lockFor})), post("k", `{}`))
	e.wantRun(retry, 200, 2)
	e.wantReplay(first, 200, 2)
	e.wantRuns(2)
}

// testLateAnswerStored: the first request outlives its lock but nobody took the
// key: its answer is stored and sent as usual.
func testLateAnswerStored(e *env) {
	const lockFor = 10 * time.Second
	e.during = func(int64, *http.Request) { e.clock.Advance(2 * lockFor) }
	h := e.handler(e.service(e.a, idempotency.Config{LockFor: lockFor}))
	e.wantRun(e.serve(h, post("k", `{}`)), 200, 1)
	e.during = nil
	e.wantReplay(e.serve(h, post("k", `{}`)), 200, 1)
}

// testTwoGateways: two Services, each with its own store handle (for redis its own
// client), share the records.
func testTwoGateways(e *env) {
	gw1 := e.handler(e.service(e.a, idempotency.Config{}))
	gw2 := e.handler(e.service(e.b, idempotency.Config{}))
	e.during = func(n int64, _ *http.Request) {
		if n == 1 {
			e.wantProblem(e.serve(gw2, post("k", `{"count":4}`)), 409, idempotency.CodeInProgress)
			e.wantProblem(e.serve(gw2, post("k", `{"count":5}`)), 422, idempotency.CodeKeyReused)
		}
	}
	e.wantRun(e.serve(gw1, post("k", `{"count":4}`)), 200, 1)
	e.wantReplay(e.serve(gw2, post("k", `{"count":4}`)), 200, 1)
	e.wantReplay(e.serve(gw1, post("k", `{"count":4}`)), 200, 1)
	e.wantRuns(1)
}

func testSafeMethods(e *env) {
	h := e.handler(e.service(e.a, idempotency.Config{Required: true}))
	for _, m := range []string{http.MethodGet, http.MethodHead, http.MethodOptions} {
		c := call{method: m, target: "/v1/ids/1", keys: []string{"k"}}
		e.serve(h, c)
		e.serve(h, c)
	}
	e.wantRuns(6)
}

func testBodyTooLarge(e *env) {
	h := e.handler(e.service(e.a, idempotency.Config{MaxBody: 16}))
	e.wantProblem(e.serve(h, post("k", `{"count":1,"pad":"xxxxxxxx"}`)), 413, protocol.CodeBodyTooLarge)
	e.wantRun(e.serve(h, post("k", `{"count":1}`)), 200, 1)
}

// testDo uses the Service without HTTP.
func testDo(e *env) {
	s := e.service(e.a, idempotency.Config{})
	ctx := e.Context()
	scope := idempotency.Scope("job-runner", "backup.create", "nightly-2026-03-01")
	var runs int
	op := func(context.Context) idempotency.Response {
		runs++
		return idempotency.Response{Status: http.StatusCreated, Header: http.Header{"Location": {"/backups/7"}, "X-Other": {"1"}}, Body: []byte("backup 7")}
	}
	res, err := s.Do(ctx, scope, "fp", op)
	if err != nil || res.Replayed || res.Status != 201 || res.Header.Get("X-Other") != "1" {
		e.Fatalf("first Do = %+v, %v", res, err)
	}
	res, err = s.Do(ctx, scope, "fp", op)
	if err != nil || !res.Replayed || res.Status != 201 || string(res.Body) != "backup 7" ||
		res.Header.Get("Location") != "/backups/7" || res.Header.Get("X-Other") != "" {
		e.Fatalf("second Do = %+v, %v", res, err)
	}
	if _, err := s.Do(ctx, scope, "other", op); protocol.ErrorCode(err) != idempotency.CodeKeyReused {
		e.Fatalf("Do with another fingerprint: %v", err)
	}
	if runs != 1 {
		e.Fatalf("the operation ran %d times", runs)
	}
}

// testLockForOption: an operation's own LockFor holds its key past the
// Service's: a retry while it runs is 409 IN_PROGRESS, not a second run.
func testLockForOption(e *env) {
	const lockFor = 30 * time.Second
	s := e.service(e.a, idempotency.Config{LockFor: lockFor})
	ctx := e.Context()
	scope := idempotency.Scope("admin", "admin.backups.create", "k")
	runs := 0
	var inner error
	var innerRan bool
	_, err := s.Do(ctx, scope, "fp", func(context.Context) idempotency.Response {
		runs++
		e.clock.Advance(lockFor + time.Minute) // a long backup
		_, inner = s.Do(ctx, scope, "fp", func(context.Context) idempotency.Response {
			innerRan = true
			return idempotency.Response{Status: http.StatusCreated}
		}, idempotency.LockFor(time.Hour))
		return idempotency.Response{Status: http.StatusCreated, Body: []byte("backup 1")}
	}, idempotency.LockFor(time.Hour))
	if err != nil || runs != 1 || innerRan || protocol.ErrorCode(inner) != idempotency.CodeInProgress {
		e.Fatalf("Do %v, runs %d; the retry meanwhile ran %v, answered %v", err, runs, innerRan, inner)
	}
	// Without the option the retry would have run: the Service's LockFor had passed.
	res, err := s.Do(ctx, scope, "fp", func(context.Context) idempotency.Response {
		e.Fatal("ran again")
		return idempotency.Response{}
	})
	if err != nil || !res.Replayed || string(res.Body) != "backup 1" {
		e.Fatalf("replay %+v %v", res, err)
	}
}
