package gateway_test

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/gateway"
	"github.com/idkeeper/idkeeper/idempotency"
	"github.com/idkeeper/idkeeper/protocol"
)

// counting returns the store's record counter.
func counting(t testing.TB, store idempotency.Store) idempotency.CountingStore {
	t.Helper()
	c, ok := store.(idempotency.CountingStore)
	if !ok {
		t.Fatalf("%T does not count records", store)
	}
	return c
}

func stats(t testing.TB, store idempotency.Store) (records, size int64) {
	t.Helper()
	records, size, err := counting(t, store).Stats(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return records, size
}

func idempotencyWith(t testing.TB, store idempotency.Store, cfg idempotency.Config) *idempotency.Service {
	t.Helper()
	cfg.Logger = quiet
	svc, err := idempotency.New(store, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

// countingBody is a request body that counts the bytes read from it.
type countingBody struct {
	r    io.Reader
	read atomic.Int64
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	b.read.Add(int64(n))
	return n, err
}

func (b *countingBody) Close() error { return nil }

// A 1 MiB body with an Idempotency-Key is refused with 413 after reading at most
// the gateway's 4 KiB (nothing when Content-Length says it is too large),
// whatever the idempotency layer would accept, and leaves no record: the key then
// runs a valid request as its first.
func TestIdempotencyOversizedBodyReadsAtMostTheLimit(t *testing.T) {
	reg := startRegistry(t, nil)
	store := boltIdem(t)
	// The layer's own limit is its default, 1 MiB: the gateway lowers it.
	svc := idempotencyWith(t, store, idempotency.Config{})
	h := newGateway(t, reg.open(t, 1), gateway.Options{Logger: quiet, Registerer: prometheus.NewRegistry(), Idempotency: svc}).Handler()
	for _, declared := range []bool{true, false} {
		for _, query := range []string{"", "?format=string"} {
			body := &countingBody{r: bytes.NewReader(bytes.Repeat([]byte(" "), 1<<20))}
			req := httptest.NewRequest(http.MethodPost, "/v1/ids"+query, nil)
			req.Body, req.ContentLength = body, -1
			if declared {
				req.ContentLength = 1 << 20
			}
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set(idempotency.HeaderKey, "big")
			w := httptest.NewRecorder()
			h.ServeHTTP(w, req)
			a := answer{status: w.Code, header: w.Result().Header, body: w.Body.Bytes()}
			a.problem(t, http.StatusRequestEntityTooLarge, protocol.CodeBodyTooLarge)
			limit := int64(gateway.MaxBodyBytes + 1)
			if declared {
				limit = 0
			}
			t.Logf("1 MiB body, Content-Length declared %v, query %q: %d bytes read", declared, query, body.read.Load())
			if body.read.Load() > limit || a.header.Get("Connection") != "close" {
				t.Fatalf("read %d bytes of a 1 MiB body (at most %d), Connection %q", body.read.Load(), limit, a.header.Get("Connection"))
			}
		}
	}
	if r, _ := stats(t, store); r != 0 {
		t.Fatalf("%d records after refusing oversized bodies, want none", r)
	}
	req := httptest.NewRequest(http.MethodPost, "/v1/ids", strings.NewReader(`{"count":2}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(idempotency.HeaderKey, "big")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	if w.Code != http.StatusOK || w.Header().Get(idempotency.HeaderReplayed) != "" {
		t.Fatalf("the key after the 413s: %d %v %s; want a fresh 200", w.Code, w.Header(), w.Body)
	}
}

// countingListener counts the bytes the server reads from its connections.
type countingListener struct {
	net.Listener
	read *atomic.Int64
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return countingConn{c, l.read}, nil
}

type countingConn struct {
	net.Conn
	read *atomic.Int64
}

func (c countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.read.Add(int64(n))
	return n, err
}

// Over TCP too, the server reads a bounded part of a 1 MiB body. With a declared
// Content-Length: the request head and one read of its 4 KiB buffer; it closes
// the connection instead of draining the rest. Sent chunked: the gateway's 4 KiB
// and one byte, then net/http, after the answer, reads up to 256 KiB more looking
// for the body's end (its own bound, maxPostHandlerReadBytes) before it closes.
func TestIdempotencyOversizedBodyOverTCP(t *testing.T) {
	reg := startRegistry(t, nil)
	svc := idempotencyWith(t, boltIdem(t), idempotency.Config{})
	srv := newGateway(t, reg.open(t, 1), gateway.Options{Logger: quiet, Registerer: prometheus.NewRegistry(), Idempotency: svc})
	var read atomic.Int64
	ts := httptest.NewUnstartedServer(srv.Handler())
	ts.Listener = countingListener{ts.Listener, &read}
	ts.Start()
	t.Cleanup(ts.Close)
	for _, declared := range []bool{true, false} {
		read.Store(0)
		var body io.Reader = bytes.NewReader(bytes.Repeat([]byte(" "), 1<<20))
		if !declared {
			body = io.MultiReader(body) // no length: sent chunked
		}
		req, _ := http.NewRequest(http.MethodPost, ts.URL+"/v1/ids", body)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(idempotency.HeaderKey, "big-tcp")
		hc := &http.Client{Transport: &http.Transport{}, Timeout: 10 * time.Second}
		resp, err := hc.Do(req)
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			answer{status: resp.StatusCode, header: resp.Header, body: b}.problem(t, http.StatusRequestEntityTooLarge, protocol.CodeBodyTooLarge)
		} else {
			// The server may close before the client has sent its body; the client
			// then sees a reset rather than the 413. Either way it read little.
			t.Logf("client: %v", err)
		}
		hc.CloseIdleConnections()
		time.Sleep(50 * time.Millisecond) // let the server finish with the connection
		t.Logf("1 MiB body, Content-Length declared %v: the server read %d bytes", declared, read.Load())
		limit := int64(gateway.MaxBodyBytes + 16<<10)
		if !declared {
			limit += 256 << 10
		}
		if read.Load() > limit {
			t.Fatalf("the server read %d bytes of a 1 MiB body, want at most %d", read.Load(), limit)
		}
	}
}

// A request with an Idempotency-Key refused for its media type or size is
// answered before the key is claimed and leaves no record: the key stays free for
// the corrected request.
func TestIdempotencyUnreadRequestsStoreNothing(t *testing.T) {
	reg := startRegistry(t, nil)
	src := &spy{IDSource: reg.open(t, 1)}
	store := boltIdem(t)
	g := startGateway(t, src, gateway.Options{Idempotency: newIdempotency(t, store, true)})
	for i, c := range []struct {
		body, ct string
		status   int
		code     idkeeper.Code
	}{
		{`{"count":1}`, "text/plain", 415, protocol.CodeUnsupportedMediaType},
		{`{"count":1}` + strings.Repeat(" ", gateway.MaxBodyBytes), "", 413, protocol.CodeBodyTooLarge},
	} {
		key := fmt.Sprintf("unread-%d", i)
		hdr := []string{idempotency.HeaderKey, key}
		if c.ct != "" {
			hdr = append(hdr, "Content-Type", c.ct)
		}
		for range 2 { // the same answer again, without a record
			g.do(http.MethodPost, "/v1/ids", c.body, hdr...).problem(t, c.status, c.code)
		}
		if r, _ := stats(t, store); r != int64(i) {
			t.Fatalf("%d: %d records, want only the %d of the corrected requests before", c.status, r, i)
		}
		fresh := g.post(`{"count":2}`, idempotency.HeaderKey, key)
		if len(fresh.ids(t)) != 2 || fresh.header.Get(idempotency.HeaderReplayed) != "" {
			t.Fatalf("the key of the %d, corrected: %v %s; want a fresh answer", c.status, fresh.header, fresh.body)
		}
		replay := g.post(`{"count":2}`, idempotency.HeaderKey, key)
		if replay.header.Get(idempotency.HeaderReplayed) != "true" || !bytes.Equal(replay.body, fresh.body) {
			t.Fatalf("the corrected request was not replayed: %v %s", replay.header, replay.body)
		}
		if calls, _, _ := src.reset(); calls != 1 {
			t.Fatalf("the corrected request and its replay minted %d chunks, want 1", calls)
		}
	}
}

// A request with an Idempotency-Key refused for its query or body binds the key to
// its exact bytes without storing the answer: the same request is refused afresh
// (not a replay), and the key with another body, {"count":2} included after
// {"count":1,"count":2}, is 422, never a mint. The binding is a small record
// counted like any other.
func TestIdempotencyRefusedRequestsBindTheKey(t *testing.T) {
	reg := startRegistry(t, nil)
	src := &spy{IDSource: reg.open(t, 1)}
	store := boltIdem(t)
	g := startGateway(t, src, gateway.Options{Idempotency: newIdempotency(t, store, true)})
	for i, c := range []struct {
		query, body string
		code        idkeeper.Code
	}{
		{"", `{"count":1,"count":2}`, protocol.CodeInvalidRequest},
		{"", `{"count":2,"count":2}`, protocol.CodeInvalidRequest},
		{"", `{"count":0}`, protocol.CodeInvalidRequest},
		{"", `{"count":10001}`, protocol.CodeCountTooLarge},
		{"", `not json`, protocol.CodeInvalidRequest},
		{"?fromat=string", `{"count":2}`, protocol.CodeInvalidRequest},
	} {
		key := fmt.Sprintf("refused-%d", i)
		for range 2 {
			a := g.do(http.MethodPost, "/v1/ids"+c.query, c.body, idempotency.HeaderKey, key)
			a.problem(t, 400, c.code)
			if a.header.Get(idempotency.HeaderReplayed) != "" {
				t.Fatalf("%q: the refusal was replayed: %v", c.body, a.header)
			}
		}
		if r, bytes := stats(t, store); r != int64(i+1) || bytes > int64(512*(i+1)) {
			t.Fatalf("%q: %d records of %d bytes, want %d small ones", c.body, r, bytes, i+1)
		}
		g.post(`{"count":2}`, idempotency.HeaderKey, key).problem(t, 422, idempotency.CodeKeyReused)
		if calls, _, _ := src.reset(); calls != 0 {
			t.Fatalf("%q: minted %d chunks", c.body, calls)
		}
	}
}

// The record of a 10,000-ID answer is a few hundred bytes, not the 190 KB of its
// JSON (254 KB in the bolt file before), in either format, on one node ID or
// several; the replay is the first answer byte for byte, with the same headers.
func TestIdempotencyCompactRecords(t *testing.T) {
	reg := startRegistry(t, nil)
	for _, nodes := range []int{1, 4} {
		store := boltIdem(t)
		g := startGateway(t, reg.open(t, nodes), gateway.Options{Idempotency: newIdempotency(t, store, false)})
		for _, c := range []struct {
			path  string
			count int
		}{{"/v1/ids", 10_000}, {"/v1/ids?format=string", 10_000}, {"/v1/ids", 1}, {"/v1/ids", 1500}} {
			key := fmt.Sprintf("compact-%s-%d", c.path, c.count)
			_, before := stats(t, store)
			body := fmt.Sprintf(`{"count":%d}`, c.count)
			fresh := g.do(http.MethodPost, c.path, body, idempotency.HeaderKey, key)
			if len(fresh.ids(t)) != c.count {
				t.Fatalf("%d IDs, want %d", len(fresh.ids(t)), c.count)
			}
			_, after := stats(t, store)
			record := after - before
			t.Logf("%d node IDs, %s count=%d: answer %d bytes, record %d bytes", nodes, c.path, c.count, len(fresh.body), record)
			if record > 1024 || (c.count == 10_000 && int64(len(fresh.body)) < 150*record) {
				t.Fatalf("a record of %d bytes for an answer of %d", record, len(fresh.body))
			}
			replay := g.do(http.MethodPost, c.path, body, idempotency.HeaderKey, key)
			if replay.header.Get(idempotency.HeaderReplayed) != "true" || !bytes.Equal(replay.body, fresh.body) {
				t.Fatalf("replay %d %v differs from the first answer", replay.status, replay.header)
			}
			for _, h := range []string{"Content-Type", "Cache-Control", "X-Content-Type-Options", "Content-Length"} {
				if replay.header.Get(h) != fresh.header.Get(h) || fresh.header.Get(h) == "" {
					t.Fatalf("%s: fresh %q, replayed %q", h, fresh.header.Get(h), replay.header.Get(h))
				}
			}
		}
	}
}

// Replayed answers carry the headers of fresh ones: Content-Type, Cache-Control:
// no-store and X-Content-Type-Options: nosniff.
func TestIdempotencyReplayHeaders(t *testing.T) {
	reg := startRegistry(t, nil)
	g := startGateway(t, reg.open(t, 1), gateway.Options{Idempotency: newIdempotency(t, boltIdem(t), false)})
	fresh := g.post(`{"count":3}`, idempotency.HeaderKey, "headers")
	replay := g.post(`{"count":3}`, idempotency.HeaderKey, "headers")
	want := map[string]string{"Content-Type": "application/json", "Cache-Control": "no-store", "X-Content-Type-Options": "nosniff",
		"Content-Length": strconv.Itoa(len(fresh.body))}
	for name, v := range want {
		if fresh.header.Get(name) != v || replay.header.Get(name) != v {
			t.Errorf("%s: fresh %q, replayed %q; want %q", name, fresh.header.Get(name), replay.header.Get(name), v)
		}
	}
	if replay.header.Get(idempotency.HeaderReplayed) != "true" || !bytes.Equal(replay.body, fresh.body) {
		t.Fatalf("not a replay: %v %s", replay.header, replay.body)
	}
}

// A consumer holds at most MaxRecords records: a new key beyond is 429
// IDEMPOTENCY_RECORDS_EXHAUSTED with Retry-After, while its keys with records are
// replayed and other consumers are served; /metrics shows the records, their
// bytes and the refusal.
func TestIdempotencyRecordsCap(t *testing.T) {
	const keyA, keyB = "idk_consumer-a-0123456789abcdefghij", "idk_consumer-b-0123456789abcdefghij"
	keys, err := gateway.ParseConsumerKeys(keyA+"\n"+keyB, "test")
	if err != nil {
		t.Fatal(err)
	}
	reg := startRegistry(t, nil)
	store := boltIdem(t)
	src := &spy{IDSource: reg.open(t, 1)}
	g := startGateway(t, src, gateway.Options{ConsumerKeys: keys,
		Idempotency: idempotencyWith(t, store, idempotency.Config{MaxRecords: 2})})
	post := func(apiKey, key string) answer {
		return g.post(`{"count":1}`, gateway.APIKeyHeader, apiKey, idempotency.HeaderKey, key)
	}
	first := post(keyA, "k1")
	first.ids(t)
	post(keyA, "k2").ids(t)
	a := post(keyA, "k3")
	p := a.problem(t, http.StatusTooManyRequests, idempotency.CodeRecordsExhausted)
	if ra, _ := strconv.Atoi(a.header.Get("Retry-After")); ra < 86000 || ra > 86400 || p["maxRecords"] != float64(2) {
		t.Fatalf("429 with Retry-After %q and %v; want about a day (the TTL) and maxRecords 2", a.header.Get("Retry-After"), p)
	}
	if again := post(keyA, "k1"); again.header.Get(idempotency.HeaderReplayed) != "true" || !bytes.Equal(again.body, first.body) {
		t.Fatalf("a key with a record, of a full consumer: %d %s", again.status, again.body)
	}
	post(keyB, "k3").ids(t)
	if calls, _, _ := src.reset(); calls != 3 {
		t.Fatalf("%d issuances, want 3", calls)
	}
	metrics := string(g.get("/metrics").body)
	for _, want := range []string{"idkeeper_idempotency_records 3", "idkeeper_idempotency_records_exhausted_total 1",
		"idkeeper_idempotency_records_stored_total 3", "idkeeper_idempotency_record_bytes "} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

// BenchmarkOversizedBody sends a 1 MiB body of unknown length with an
// Idempotency-Key to the handler: read-B/op is what the gateway reads of it
// (1,048,576 before the gateway's limit came first; now its 4 KiB and one byte).
func BenchmarkOversizedBody(b *testing.B) {
	reg := startRegistry(b, nil)
	h := newGateway(b, reg.open(b, 1), gateway.Options{Logger: quiet, Registerer: prometheus.NewRegistry(),
		Idempotency: idempotencyWith(b, boltIdem(b), idempotency.Config{})}).Handler()
	payload := bytes.Repeat([]byte(" "), 1<<20)
	var read int64
	b.ReportAllocs()
	for b.Loop() {
		body := &countingBody{r: bytes.NewReader(payload)}
		req := httptest.NewRequest(http.MethodPost, "/v1/ids", nil)
		req.Body, req.ContentLength = body, -1
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(idempotency.HeaderKey, "big")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != http.StatusRequestEntityTooLarge {
			b.Fatalf("status %d", w.Code)
		}
		read += body.read.Load()
	}
	b.ReportMetric(float64(read)/float64(b.N), "read-B/op")
}
