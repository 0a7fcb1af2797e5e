package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/client"
	"github.com/idkeeper/idkeeper/client/clienttest"
	"github.com/idkeeper/idkeeper/gateway"
	"github.com/idkeeper/idkeeper/internal/harness/registrytest"
	"github.com/idkeeper/idkeeper/internal/wire"
	"github.com/idkeeper/idkeeper/protocol"
	"github.com/idkeeper/idkeeper/snowflake"
)

// Requests of every size come back complete, strictly ascending and unique, and
// a request larger than one millisecond of one generator is split into one chunk
// per generator, minted in parallel, so every node ID contributes.
func TestIssueSortedUniqueAndChunked(t *testing.T) {
	const nodes = 4
	reg := startRegistry(t, nil)
	sess := reg.open(t, nodes)
	src := &spy{IDSource: sess}
	g := startGateway(t, src, gateway.Options{})
	leased := map[int64]bool{}
	for _, l := range sess.Leases() {
		leased[l.NodeID] = true
	}
	layout := sess.Layout()
	seen := map[int64]bool{}
	for _, c := range []struct {
		count  int
		chunks []int // sorted sizes of the chunks minted
	}{
		{1, []int{1}},
		{7, []int{7}},
		{1024, []int{1024}},
		{1025, []int{512, 513}},
		{4096, []int{1024, 1024, 1024, 1024}},
		{5000, []int{1250, 1250, 1250, 1250}},
		{gateway.DefaultMaxCount, []int{2500, 2500, 2500, 2500}},
	} {
		ids := g.post(fmt.Sprintf(`{"count":%d}`, c.count)).ids(t)
		if len(ids) != c.count {
			t.Fatalf("count %d: got %d IDs", c.count, len(ids))
		}
		checkAscending(t, ids)
		nodesUsed := map[int64]bool{}
		for _, id := range ids {
			if seen[id] {
				t.Fatalf("ID %d handed out twice", id)
			}
			seen[id] = true
			p, err := layout.Decode(id)
			if err != nil || !leased[p.Node] {
				t.Fatalf("ID %d decodes to node %d (err %v); leased: %v", id, p.Node, err, leased)
			}
			nodesUsed[p.Node] = true
		}
		calls, sizes, _ := src.reset()
		if calls != len(c.chunks) || !slices.Equal(sizes, c.chunks) {
			t.Fatalf("count %d: minted in chunks %v, want %v", c.count, sizes, c.chunks)
		}
		if c.count >= nodes*1024 && len(nodesUsed) != nodes {
			t.Fatalf("count %d: IDs of node IDs %v only, want all %d", c.count, nodesUsed, nodes)
		}
	}
}

// A request whose one chunk fails fails whole: 503, no ID in the answer, and the
// IDs the other chunks minted are a gap, never handed out later. Such an answer
// is not stored for its Idempotency-Key: the retry mints afresh.
func TestFailingChunkFailsTheWholeRequest(t *testing.T) {
	reg := startRegistry(t, nil)
	sess := reg.open(t, 4)
	src := &spy{IDSource: sess}
	g := startGateway(t, src, gateway.Options{Idempotency: newIdempotency(t, boltIdem(t), false)})

	src.fail = func(call int) error {
		if call == 3 {
			return errInjected
		}
		return nil
	}
	a := g.post(`{"count":4096}`, "Idempotency-Key", "retry-me")
	p := a.problem(t, http.StatusServiceUnavailable, gateway.CodeIssuingUnavailable)
	if a.header.Get("Retry-After") == "" || strings.Contains(string(a.body), `"ids"`) {
		t.Fatalf("503 without Retry-After or with IDs: %v %s", a.header, a.body)
	}
	if !strings.Contains(p["detail"].(string), errInjected.Error()) {
		t.Fatalf("detail %q does not tell the cause", p["detail"])
	}
	calls, _, dropped := src.reset()
	if calls != 4 || len(dropped) != 4096 {
		t.Fatalf("the failed request minted %d IDs in %d chunks, want 4096 in 4", len(dropped), calls)
	}
	src.fail = nil

	gap := map[int64]bool{}
	for _, id := range dropped {
		gap[id] = true
	}
	retried := g.post(`{"count":4096}`, "Idempotency-Key", "retry-me").ids(t)
	more := g.post(`{"count":10000}`).ids(t)
	for _, id := range append(retried, more...) {
		if gap[id] {
			t.Fatalf("ID %d of the failed request was handed out later", id)
		}
	}
	if a := g.get("/health"); a.status != http.StatusOK {
		t.Fatalf("health after a failed chunk: %d %s", a.status, a.body)
	}
}

// ?format=string sends the same IDs as JSON strings, for JavaScript.
func TestStringFormat(t *testing.T) {
	reg := startRegistry(t, nil)
	g := startGateway(t, reg.open(t, 2), gateway.Options{})
	a := g.do(http.MethodPost, "/v1/ids?format=string", `{"count":3000}`)
	var v struct{ IDs []string }
	if err := json.Unmarshal(a.body, &v); err != nil || len(v.IDs) != 3000 {
		t.Fatalf("%d %s: %v", a.status, a.body[:min(len(a.body), 200)], err)
	}
	ids := a.ids(t)
	for i, s := range v.IDs {
		if s != strconv.FormatInt(ids[i], 10) {
			t.Fatalf("string %q is not the ID %d", s, ids[i])
		}
	}
	checkAscending(t, ids)
	if ids[0] < 1<<53 {
		t.Fatalf("ID %d is below 2^53: the test no longer shows why strings matter", ids[0])
	}
	num := g.do(http.MethodPost, "/v1/ids?format=number", `{"count":2}`)
	if !strings.HasPrefix(string(num.body), `{"ids":[`) || strings.Contains(string(num.body), `"`+"1") {
		t.Fatalf("format=number: %s", num.body)
	}
}

// GET /v1/ids/{id} decodes an issued ID with the session's layout.
func TestDecode(t *testing.T) {
	reg := startRegistry(t, nil)
	sess := reg.open(t, 1)
	g := startGateway(t, sess, gateway.Options{})
	before := time.Now().UTC().Truncate(time.Millisecond)
	id := g.post(`{"count":1}`).ids(t)[0]
	after := time.Now()

	a := g.get("/v1/ids/" + strconv.FormatInt(id, 10))
	var d struct {
		ID       string
		Time     string
		NodeID   int64
		Sequence int64
	}
	if a.status != http.StatusOK || json.Unmarshal(a.body, &d) != nil {
		t.Fatalf("%d %s", a.status, a.body)
	}
	tm, err := time.Parse(wire.TimeFormat, d.Time)
	if err != nil || d.ID != strconv.FormatInt(id, 10) || d.NodeID != sess.Leases()[0].NodeID ||
		tm.Before(before) || tm.After(after) || !strings.HasSuffix(d.Time, "Z") {
		t.Fatalf("decoded %+v (time %v, err %v); issued between %v and %v", d, tm, err, before, after)
	}
	p, _ := sess.Layout().Decode(id)
	if d.Sequence != p.Sequence {
		t.Fatalf("sequence %d, want %d", d.Sequence, p.Sequence)
	}
	for _, bad := range []string{"abc", "-1", "+5", "1.5", "9223372036854775808", "99999999999999999999", "0x10"} {
		g.get("/v1/ids/"+bad).problem(t, http.StatusBadRequest, protocol.CodeInvalidRequest)
	}
}

// /health is the issuing path: green while issuing works, red from the very
// moment the lease ends on the session's monotonic clock (before any timer has
// run), and never green while issuing answers 503. /livez turns red once the
// session has ended for good.
func TestHealthTurnsRedTheMomentTheLeaseEnds(t *testing.T) {
	clk := clienttest.NewClock(t0)
	reg := startRegistry(t, func() time.Time { return t0.Add(clk.Mono()) })
	fatal := make(chan error, 1)
	cfg := reg.config(t, 1, fatal)
	cfg.Clock = clk
	sess := openSession(t, cfg)
	g := startGateway(t, sess, gateway.Options{})

	agree := func(wantOK bool) {
		t.Helper()
		issue, health, ready := g.post(`{"count":1}`), g.get("/health"), g.get("/readyz")
		if (issue.status == 200) != wantOK || (health.status == 200) != wantOK || (ready.status == 200) != wantOK {
			t.Fatalf("issue %d, health %d, readyz %d; want all OK: %v\n%s\n%s", issue.status, health.status, ready.status, wantOK, issue.body, health.body)
		}
		if !wantOK {
			issue.problem(t, http.StatusServiceUnavailable, gateway.CodeIssuingUnavailable)
			health.problem(t, http.StatusServiceUnavailable, gateway.CodeIssuingUnavailable)
			ready.problem(t, http.StatusServiceUnavailable, protocol.CodeNotReady)
		}
	}
	agree(true)
	left := sess.TimeLeft()
	if left < time.Hour {
		t.Fatalf("time left %v", left)
	}
	clk.Jump(left - time.Millisecond)
	agree(true)
	clk.Jump(time.Millisecond) // the deadline: no timer has fired
	agree(false)
	if a := g.get("/livez"); a.status != http.StatusOK {
		t.Fatalf("livez before the session ended: %d", a.status)
	}

	clk.Advance(0) // the session's timers notice and report the loss
	select {
	case err := <-fatal:
		if !errors.Is(err, client.ErrLeaseLost) {
			t.Fatalf("OnFatal got %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("OnFatal was not called")
	}
	agree(false)
	g.get("/livez").problem(t, http.StatusServiceUnavailable, gateway.CodeIssuingUnavailable)
}

// Before the session holds a lease the gateway serves, answers 503 to issuance
// and health, and does not know the layout yet; /livez is green.
func TestBeforeOpen(t *testing.T) {
	reg := startRegistry(t, nil)
	sess, err := client.New(reg.config(t, 1, nil))
	if err != nil {
		t.Fatal(err)
	}
	g := startGateway(t, sess, gateway.Options{Version: "v1.2.3", Commit: "abc"})
	g.post(`{"count":1}`).problem(t, http.StatusServiceUnavailable, gateway.CodeIssuingUnavailable)
	g.get("/health").problem(t, http.StatusServiceUnavailable, gateway.CodeIssuingUnavailable)
	g.get("/v1/ids/12345").problem(t, http.StatusServiceUnavailable, protocol.CodeNotReady)
	if a := g.get("/v1/version"); a.status != 200 || string(a.body) != `{"version":"v1.2.3","commit":"abc","layout":null}`+"\n" {
		t.Fatalf("version before open: %d %s", a.status, a.body)
	}
	if a := g.get("/livez"); a.status != http.StatusOK {
		t.Fatalf("livez: %d", a.status)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := sess.Open(ctx); err != nil {
		t.Fatal(err)
	}
	g.post(`{"count":1}`).ids(t)
	var v struct{ Layout *struct{ Epoch string } }
	if a := g.get("/v1/version"); json.Unmarshal(a.body, &v) != nil || v.Layout == nil || v.Layout.Epoch != "2026-01-01T00:00:00.000Z" {
		t.Fatalf("version after open: %s", a.body)
	}
	sess.Close()
	g.get("/livez").problem(t, http.StatusServiceUnavailable, gateway.CodeIssuingUnavailable)
	g.post(`{"count":1}`).problem(t, http.StatusServiceUnavailable, gateway.CodeIssuingUnavailable)
}

const consumerKey = "idk_consumer-one-0123456789abcdef"

// With consumer keys, issuance and decoding need a valid X-API-Key (401
// problem+json otherwise); version and the probes do not.
func TestConsumerKeys(t *testing.T) {
	reg := startRegistry(t, nil)
	const other = "idk_consumer-two-0123456789abcdef"
	keys, err := gateway.ParseConsumerKeys(consumerKey+"\n# a comment\n\n"+hashOf(other), "test")
	if err != nil || keys.Len() != 2 {
		t.Fatalf("%v %d", err, keys.Len())
	}
	g := startGateway(t, reg.open(t, 1), gateway.Options{ConsumerKeys: keys, Idempotency: newIdempotency(t, boltIdem(t), false)})

	g.post(`{"count":1}`).problem(t, http.StatusUnauthorized, protocol.CodeAPIKeyMissing)
	g.post(`{"count":1}`, "X-API-Key", consumerKey+"x").problem(t, http.StatusUnauthorized, protocol.CodeAPIKeyInvalid)
	g.get("/v1/ids/1").problem(t, http.StatusUnauthorized, protocol.CodeAPIKeyMissing)
	a := g.post(`{"count":2}`, "X-API-Key", consumerKey, "Idempotency-Key", "k1")
	b := g.post(`{"count":2}`, "X-API-Key", other, "Idempotency-Key", "k1")
	if ia, ib := a.ids(t), b.ids(t); slices.Equal(ia, ib) {
		t.Fatal("two consumers with the same Idempotency-Key got the same IDs: the key is scoped per consumer")
	}
	if again := g.post(`{"count":2}`, "X-API-Key", consumerKey, "Idempotency-Key", "k1"); string(again.body) != string(a.body) {
		t.Fatalf("replay for the same consumer: %s, want %s", again.body, a.body)
	}
	if d := g.get("/v1/ids/1", "X-API-Key", other); d.status != http.StatusOK {
		t.Fatalf("decode with a key: %d %s", d.status, d.body)
	}
	for _, path := range []string{"/v1/version", "/health", "/livez", "/readyz", "/metrics"} {
		if a := g.get(path); a.status != http.StatusOK {
			t.Fatalf("%s without a key: %d", path, a.status)
		}
	}
}

// Bad requests get 400 (or 413, 415) with a code and the field at fault, and
// mint nothing.
func TestRequestValidation(t *testing.T) {
	reg := startRegistry(t, nil)
	src := &spy{IDSource: reg.open(t, 1)}
	g := startGateway(t, src, gateway.Options{})
	small := startGateway(t, src, gateway.Options{MaxCount: 50})
	for _, c := range []struct {
		g           *gw
		query, body string
		ct          string
		status      int
		code        idkeeper.Code
		field       string
	}{
		{g, "", `{"count":0}`, "", 400, protocol.CodeInvalidRequest, "count"},
		{g, "", `{"count":-3}`, "", 400, protocol.CodeInvalidRequest, "count"},
		{g, "", `{"count":1.5}`, "", 400, protocol.CodeInvalidRequest, "count"},
		{g, "", `{"count":1e2}`, "", 400, protocol.CodeInvalidRequest, "count"},
		{g, "", `{"count":"5"}`, "", 400, protocol.CodeInvalidRequest, "count"},
		{g, "", `{"count":null}`, "", 400, protocol.CodeInvalidRequest, "count"},
		{g, "", `{}`, "", 400, protocol.CodeInvalidRequest, "count"},
		{g, "", `{"count":1,"count":2}`, "", 400, protocol.CodeInvalidRequest, "count"},
		{g, "", `{"count":1,"format":"string"}`, "", 400, protocol.CodeInvalidRequest, "format"},
		{g, "", `{"Count":1}`, "", 400, protocol.CodeInvalidRequest, "Count"},
		{g, "", `[1]`, "", 400, protocol.CodeInvalidRequest, "body"},
		{g, "", `{"count":1} {}`, "", 400, protocol.CodeInvalidRequest, "body"},
		{g, "", `{"count":1`, "", 400, protocol.CodeInvalidRequest, "body"},
		{g, "", ` `, "", 400, protocol.CodeInvalidRequest, "body"},
		{g, "", `{"count":10001}`, "", 400, protocol.CodeCountTooLarge, "count"},
		{g, "", `{"count":99999999999999999999999}`, "", 400, protocol.CodeCountTooLarge, "count"},
		{small, "", `{"count":51}`, "", 400, protocol.CodeCountTooLarge, "count"},
		{g, "format=xml", `{"count":1}`, "", 400, protocol.CodeInvalidRequest, "format"},
		{g, "fromat=string", `{"count":1}`, "", 400, protocol.CodeInvalidRequest, "fromat"},
		{g, "format=string&format=string", `{"count":1}`, "", 400, protocol.CodeInvalidRequest, "format"},
		{g, "", `{"count":1}`, "text/plain", 415, protocol.CodeUnsupportedMediaType, ""},
		{g, "", `{"count":1}`, "application/x-www-form-urlencoded", 415, protocol.CodeUnsupportedMediaType, ""},
		{g, "", `{"count":1}`, "application/json; charset=latin1", 415, protocol.CodeUnsupportedMediaType, ""},
		{g, "", `{"count":1}` + strings.Repeat(" ", gateway.MaxBodyBytes), "", 413, protocol.CodeBodyTooLarge, ""},
	} {
		path := "/v1/ids"
		if c.query != "" {
			path += "?" + c.query
		}
		var hdr []string
		if c.ct != "" {
			hdr = []string{"Content-Type", c.ct}
		}
		a := c.g.do(http.MethodPost, path, c.body, hdr...)
		p := a.problem(t, c.status, c.code)
		if f, _ := p["field"].(string); f != c.field {
			t.Errorf("%s %.40s: field %q, want %q", path, c.body, f, c.field)
		}
		if c.code == protocol.CodeCountTooLarge && p["maxCount"] != float64(c.g.srv.MaxCount()) {
			t.Errorf("COUNT_TOO_LARGE without maxCount %d: %v", c.g.srv.MaxCount(), p)
		}
	}
	if calls, _, _ := src.reset(); calls != 0 {
		t.Fatalf("bad requests minted %d chunks", calls)
	}
	for _, ok := range []string{`{"count":50}`, " {\n\t\"count\" : 50 }\r\n", `{"\u0063ount":50}`} {
		if ids := small.post(ok).ids(t); len(ids) != 50 {
			t.Fatalf("%q: %d IDs", ok, len(ids))
		}
	}
	if a := g.do(http.MethodPost, "/v1/ids", `{"count":1}`, "Content-Type", "application/json; charset=UTF-8"); a.status != 200 {
		t.Fatalf("charset=UTF-8: %d", a.status)
	}
}

// Unknown routes and methods get problem+json too.
func TestNotFoundAndMethodNotAllowed(t *testing.T) {
	reg := startRegistry(t, nil)
	g := startGateway(t, reg.open(t, 1), gateway.Options{})
	g.get("/v2/ids").problem(t, http.StatusNotFound, protocol.CodeNotFound)
	a := g.get("/v1/ids")
	a.problem(t, http.StatusMethodNotAllowed, protocol.CodeMethodNotAllowed)
	if a.header.Get("Allow") == "" {
		t.Fatal("405 without Allow")
	}
	g.do(http.MethodDelete, "/v1/ids/5", "").problem(t, http.StatusMethodNotAllowed, protocol.CodeMethodNotAllowed)
}

// /metrics shows the gateway's series.
func TestMetrics(t *testing.T) {
	reg := startRegistry(t, nil)
	g := startGateway(t, reg.open(t, 1), gateway.Options{})
	g.post(`{"count":7}`).ids(t)
	g.post(`{"count":0}`)
	body := string(g.get("/metrics").body)
	for _, want := range []string{
		"idkeeper_gateway_ids_issued_total 7",
		`idkeeper_gateway_requests_total{route="issue",status="200"} 1`,
		`idkeeper_gateway_requests_total{route="issue",status="400"} 1`,
		`idkeeper_gateway_request_duration_seconds_count{route="issue"} 2`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %q:\n%s", want, body)
		}
	}
}

// fixedSource mints consecutive numbers without a lease: for measuring the
// gateway's own work.
type fixedSource struct{ next int64 }

func (f *fixedSource) NextIDs(dst []int64) error {
	for i := range dst {
		f.next++
		dst[i] = f.next
	}
	return nil
}
func (*fixedSource) NumGenerators() int       { return 1 }
func (*fixedSource) Check() error             { return nil }
func (*fixedSource) Layout() snowflake.Layout { return snowflake.DefaultLayout }

// discard is a ResponseWriter that keeps only the status and the size.
type discard struct {
	h      http.Header
	status int
	n      int
}

func (w *discard) Header() http.Header { return w.h }
func (w *discard) WriteHeader(c int)   { w.status = c }
func (w *discard) Write(b []byte) (int, error) {
	w.n += len(b)
	return len(b), nil
}

// Issuing allocates per request, never per ID: the IDs and their JSON live in
// pooled buffers, written with strconv.AppendInt.
func TestIssueDoesNotAllocatePerID(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool drop buffers at random")
	}
	h := newGateway(t, &fixedSource{next: 1 << 60}, gateway.Options{Logger: quiet, Registerer: prometheus.NewRegistry()}).Handler()
	allocs := func(count int, query string) float64 {
		body := []byte(fmt.Sprintf(`{"count":%d}`, count))
		rd := bytes.NewReader(body)
		req := httptest.NewRequest(http.MethodPost, "/v1/ids"+query, nil)
		req.Header.Set("Content-Type", "application/json")
		req.Body = io.NopCloser(rd)
		w := &discard{h: http.Header{}}
		return testing.AllocsPerRun(500, func() {
			rd.Reset(body)
			clear(w.h)
			w.status, w.n = 0, 0
			h.ServeHTTP(w, req)
			if w.status != http.StatusOK || w.n < count*19 {
				t.Fatalf("status %d, %d bytes", w.status, w.n)
			}
		})
	}
	one, many, most, str := allocs(1, ""), allocs(1000, ""), allocs(10000, ""), allocs(1000, "?format=string")
	t.Logf("allocations per request: count=1 %v, count=1000 %v, count=10000 %v, count=1000 as strings %v", one, many, most, str)
	// A long answer sets Content-Length itself: a string and its header slice.
	if one > 2 || many > one+2 || most != many || str != many {
		t.Fatalf("allocations per request: count=1 %v, count=1000 %v, count=10000 %v, count=1000 as strings %v", one, many, most, str)
	}
}

// TestNewRefusesBadOptions: an option outside its range is an error naming it,
// not a panic; zero means the default.
func TestNewRefusesBadOptions(t *testing.T) {
	src := &fixedSource{next: 1 << 60}
	for _, n := range []int{-1, gateway.MaxMaxCount + 1} {
		srv, err := gateway.New(src, gateway.Options{MaxCount: n, Logger: quiet})
		var re *idkeeper.RangeError
		if srv != nil || !errors.As(err, &re) || re.Setting != "MaxCount" || re.Value != strconv.Itoa(n) {
			t.Errorf("MaxCount %d: %v, %v; want a RangeError", n, srv, err)
		}
	}
	srv, err := gateway.New(src, gateway.Options{Logger: quiet, Registerer: prometheus.NewRegistry()})
	if err != nil || srv.MaxCount() != gateway.DefaultMaxCount {
		t.Fatalf("zero MaxCount: %v, %v; want the default %d", srv, err, gateway.DefaultMaxCount)
	}
}

// /metrics shows idkeeper_build_info{version,commit,goversion} 1, with the
// Options' Version and Commit, as the registry's does.
func TestBuildInfo(t *testing.T) {
	g := startGateway(t, &fixedSource{}, gateway.Options{Version: "v9.8.7", Commit: "feedbeef"})
	body := string(g.get("/metrics").body)
	want := `idkeeper_build_info{commit="feedbeef",goversion="` + runtime.Version() + `",version="v9.8.7"} 1` + "\n"
	if !strings.Contains(body, want) {
		t.Fatalf("metrics lack %q:\n%s", want, body)
	}
}

// A count that is not one names the counts this gateway hands out, 1..MaxCount.
func TestCountErrorNamesItsBounds(t *testing.T) {
	g := startGateway(t, &fixedSource{}, gateway.Options{MaxCount: 500})
	for _, count := range []string{"0", "-3", "1.5", `"2"`} {
		p := g.post(`{"count":`+count+`}`).problem(t, http.StatusBadRequest, protocol.CodeInvalidRequest)
		if d, _ := p["detail"].(string); !strings.Contains(d, "1..500") {
			t.Errorf("count %s: detail %q does not name 1..500", count, d)
		}
	}
}

// The debug access log gives the client's address as remoteIp, the bare IP, as the
// registry's does.
func TestAccessLogRemoteIP(t *testing.T) {
	logs := &registrytest.SyncBuffer{}
	log := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	g := startGateway(t, &fixedSource{}, gateway.Options{Logger: log})
	g.get("/v1/version")
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(logs.String(), `"msg":"http request"`) && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond) // the line is written after the answer
	}
	s := logs.String()
	if !strings.Contains(s, `"remoteIp":"127.0.0.1"`) || strings.Contains(s, "remoteAddr") {
		t.Fatalf("access log %s: want remoteIp 127.0.0.1 and no remoteAddr", s)
	}
}
