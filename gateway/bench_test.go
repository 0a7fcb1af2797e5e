package gateway_test

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper/gateway"
	"github.com/prometheus/client_golang/prometheus"
)

// The benchmarks and the load run measure the gateway over real HTTP on loopback,
// against a real registry and session on the system clock, configured as
// `idkeeper gateway` runs it: metrics registered, an idempotency store configured
// (requests carry no key), no consumer keys. The bare net/http handler is served
// and driven in exactly the same way, so the two numbers compare.

// benchClients is how many client goroutines per GOMAXPROCS drive the server.
const benchClients = 8

// benchGateway serves a gateway with nodes node IDs and returns its URL.
func benchGateway(t testing.TB, nodes int) string {
	reg := startRegistry(t, nil)
	pr := prometheus.NewRegistry()
	srv := newGateway(t, reg.open(t, nodes), gateway.Options{
		Logger: quiet, Registerer: pr, Gatherer: pr, Idempotency: newIdempotency(t, boltIdem(t), false),
	})
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	return ts.URL + "/v1/ids"
}

// bareBody is what the bare handler sends: an answer of the size of count=1's.
var bareBody = []byte(`{"ids":[123456789012345678]}` + "\n")

// bareServer serves a bare net/http handler that answers every request with a
// constant body: the ceiling of what net/http serves on this machine.
func bareServer(t testing.TB) string {
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header()["Content-Type"] = []string{"application/json"}
		_, _ = w.Write(bareBody)
	}))
	t.Cleanup(ts.Close)
	return ts.URL + "/v1/ids"
}

// newLoadClient is an HTTP client that keeps a connection per client goroutine.
func newLoadClient(conns int) *http.Client {
	return &http.Client{Transport: &http.Transport{MaxIdleConns: conns, MaxIdleConnsPerHost: conns, DisableCompression: true}}
}

// post is the client loop's one request: POST body, read the whole answer, and
// check the status and that the answer is at least minLen bytes long.
func post(hc *http.Client, url string, body []byte, minLen int64) error {
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header["Content-Type"] = []string{"application/json"}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	n, err := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	switch {
	case err != nil:
		return err
	case resp.StatusCode != http.StatusOK || n < minLen:
		return fmt.Errorf("status %d, %d bytes", resp.StatusCode, n)
	}
	return nil
}

// drive runs the client loop under b.RunParallel and reports requests/s, and
// IDs/s and the share of the ceiling when count > 1.
func drive(b *testing.B, url string, count, nodes int) {
	body := fmt.Appendf(nil, `{"count":%d}`, count)
	minLen := int64(len(bareBody))
	if count > 1 {
		minLen = int64(count) * 19
	}
	hc := newLoadClient(256)
	defer hc.CloseIdleConnections()
	b.SetParallelism(benchClients)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := post(hc, url, body, minLen); err != nil {
				b.Error(err)
				return
			}
		}
	})
	elapsed := time.Since(start)
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "req/s")
	if count > 1 {
		rate := float64(b.N) * float64(count) / elapsed.Seconds()
		b.ReportMetric(rate, "ids/s")
		b.ReportMetric(100*rate/(float64(nodes)*1_024_000), "%ceiling")
	}
}

// BenchmarkGatewayCount1000 issues 1,000 IDs per request; the ceiling is
// node IDs × 1,024,000 IDs/s.
func BenchmarkGatewayCount1000(b *testing.B) {
	for _, nodes := range []int{1, 2} {
		b.Run(fmt.Sprintf("nodes=%d", nodes), func(b *testing.B) {
			drive(b, benchGateway(b, nodes), 1000, nodes)
		})
	}
}

// BenchmarkGatewayCount1 issues one ID per request: the gateway's per-request
// cost. Compare with BenchmarkBareNetHTTP.
func BenchmarkGatewayCount1(b *testing.B) { drive(b, benchGateway(b, 1), 1, 1) }

// BenchmarkBareNetHTTP is a net/http handler that returns a constant body, driven
// by the same client loop.
func BenchmarkBareNetHTTP(b *testing.B) { drive(b, bareServer(b), 1, 1) }

// BenchmarkHandler is the gateway's own work per request, without the network:
// the handler called directly with a request and a ResponseWriter that discards.
// count=1 mints with a real session (system clock, 2 node IDs); the count=1000 rows
// mint with a source that counts (no per-millisecond ceiling), so they show the CPU
// cost of a large answer. "bare" is the constant handler under the same harness.
func BenchmarkHandler(b *testing.B) {
	reg := startRegistry(b, nil)
	pr := prometheus.NewRegistry()
	gw := newGateway(b, reg.open(b, 2), gateway.Options{Logger: quiet, Registerer: pr, Gatherer: pr,
		Idempotency: newIdempotency(b, boltIdem(b), false)}).Handler()
	fixed := newGateway(b, &fixedSource{next: 1 << 60}, gateway.Options{Logger: quiet, Registerer: prometheus.NewRegistry()}).Handler()
	bare := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header()["Content-Type"] = []string{"application/json"}
		_, _ = w.Write(bareBody)
	})
	for _, c := range []struct {
		name  string
		h     http.Handler
		count int
		query string
	}{
		{"bare", bare, 1, ""},
		{"count=1", gw, 1, ""},
		{"count=1000", fixed, 1000, ""},
		{"count=1000/format=string", fixed, 1000, "?format=string"},
	} {
		b.Run(c.name, func(b *testing.B) {
			body := fmt.Appendf(nil, `{"count":%d}`, c.count)
			rd := bytes.NewReader(body)
			req := httptest.NewRequest(http.MethodPost, "/v1/ids"+c.query, nil)
			req.Header.Set("Content-Type", "application/json")
			req.Body = io.NopCloser(rd)
			w := &discard{h: http.Header{}}
			b.ReportAllocs()
			for b.Loop() {
				rd.Reset(body)
				clear(w.h)
				w.status = 0
				c.h.ServeHTTP(w, req)
				if w.status != http.StatusOK && w.status != 0 {
					b.Fatalf("status %d", w.status)
				}
			}
		})
	}
}

var (
	loadRun      = flag.Bool("load", false, "run TestLoad: the gateway's load run (docs/benchmarks.md)")
	loadDuration = flag.Duration("load.duration", 5*time.Second, "TestLoad: how long each phase runs")
	loadClients  = flag.Int("load.clients", 16, "TestLoad: concurrent client goroutines, each with its own keep-alive connection")
	loadMax      = flag.Int("load.max", 2_000_000, "TestLoad: the most requests one phase sends")
)

// phase is the outcome of one load phase.
type phase struct {
	name       string
	requests   int
	elapsed    time.Duration
	ids        int
	nodes      int
	p50, p99   time.Duration
	p999, pmax time.Duration
}

func (p phase) rps() float64 { return float64(p.requests) / p.elapsed.Seconds() }

// runPhase sends requests from clients goroutines for d or max requests, whichever
// ends first, and measures each request's latency.
func runPhase(t *testing.T, name, url string, count, nodes, clients int, d time.Duration, max int) phase {
	body := fmt.Appendf(nil, `{"count":%d}`, count)
	minLen := int64(len(bareBody))
	if count > 1 {
		minLen = int64(count) * 19
	}
	hc := newLoadClient(clients)
	defer hc.CloseIdleConnections()
	var sent atomic.Int64
	lat := make([][]time.Duration, clients)
	var failed atomic.Value
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(d)
	for c := range clients {
		lat[c] = make([]time.Duration, 0, min(max/clients+1, 1<<20))
		wg.Go(func() {
			for sent.Add(1) <= int64(max) {
				t0 := time.Now()
				if t0.After(deadline) {
					return
				}
				if err := post(hc, url, body, minLen); err != nil {
					failed.Store(err)
					return
				}
				lat[c] = append(lat[c], time.Since(t0))
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err := failed.Load(); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	all := slices.Concat(lat...)
	slices.Sort(all)
	q := func(f float64) time.Duration { return all[min(len(all)-1, int(f*float64(len(all))))] }
	return phase{name: name, requests: len(all), elapsed: elapsed, ids: len(all) * count, nodes: nodes,
		p50: q(0.50), p99: q(0.99), p999: q(0.999), pmax: all[len(all)-1]}
}

// TestLoad is the gateway's load run, off by default:
//
//	go test -run TestLoad -load ./gateway/
//
// It runs, one after another on the same machine and with the same client loop:
// the bare net/http handler and the gateway with count=1, alternating twice, then
// the gateway with count=1000 on one and on two node IDs. Each phase is bounded by
// -load.duration and -load.max. It fails when count=1 reaches less than 0.7× the
// bare handler's requests/s, or count=1000 less than 80 % of the ceiling.
func TestLoad(t *testing.T) {
	if !*loadRun {
		t.Skip("the load run is off; run with -load")
	}
	bare, gw1, gw2 := bareServer(t), benchGateway(t, 1), benchGateway(t, 2)
	n, d, max := *loadClients, *loadDuration, *loadMax
	runPhase(t, "warm-up", gw1, 1, 1, n, time.Second, max) // connections, pools, the JIT of the page cache
	runPhase(t, "warm-up", bare, 1, 1, n, time.Second, max)
	var phases []phase
	for range 2 {
		phases = append(phases,
			runPhase(t, "bare net/http, constant body", bare, 1, 1, n, d, max),
			runPhase(t, "gateway count=1", gw1, 1, 1, n, d, max))
	}
	phases = append(phases,
		runPhase(t, "gateway count=1000, 1 node ID", gw1, 1000, 1, n, d, max),
		runPhase(t, "gateway count=1000, 2 node IDs", gw2, 1000, 2, n, d, max))

	var b strings.Builder
	fmt.Fprintf(&b, "\n%d clients, %v per phase\n\n| phase | requests | req/s | IDs/s | of ceiling | p50 | p99 | p99.9 | max |\n|---|---|---|---|---|---|---|---|---|\n", n, d)
	var bareRPS, gwRPS []float64
	var worstCeiling = 100.0
	for _, p := range phases {
		idsCol, ceilCol := "", ""
		if strings.Contains(p.name, "count=1000") {
			rate := float64(p.ids) / p.elapsed.Seconds()
			share := 100 * rate / (float64(p.nodes) * 1_024_000)
			worstCeiling = min(worstCeiling, share)
			idsCol, ceilCol = fmt.Sprintf("%.0f", rate), fmt.Sprintf("%.1f %%", share)
		}
		switch p.name {
		case "bare net/http, constant body":
			bareRPS = append(bareRPS, p.rps())
		case "gateway count=1":
			gwRPS = append(gwRPS, p.rps())
		}
		fmt.Fprintf(&b, "| %s | %d | %.0f | %s | %s | %v | %v | %v | %v |\n", p.name, p.requests, p.rps(), idsCol, ceilCol,
			p.p50.Round(time.Microsecond), p.p99.Round(time.Microsecond), p.p999.Round(time.Microsecond), p.pmax.Round(time.Microsecond))
	}
	ratio := (gwRPS[0] + gwRPS[1]) / (bareRPS[0] + bareRPS[1])
	fmt.Fprintf(&b, "\ncount=1: %.2f× the bare handler's requests/s; count=1000: at least %.1f %% of the ceiling\n", ratio, worstCeiling)
	t.Log(b.String())
	if ratio < 0.7 {
		t.Errorf("count=1 reached %.2f× the bare handler's requests/s, want at least 0.7×", ratio)
	}
	if worstCeiling < 80 {
		t.Errorf("count=1000 reached %.1f %% of the ceiling, want at least 80 %%", worstCeiling)
	}
}
