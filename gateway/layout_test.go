package gateway_test

import (
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/gateway"
	"github.com/idkeeper/idkeeper/internal/harness/registrytest"
	"github.com/idkeeper/idkeeper/snowflake"
	"github.com/prometheus/client_golang/prometheus"
)

// layout41_10_12 is the Twitter/Discord-style layout of issue #22: 1,024 node IDs,
// 4,096 IDs per millisecond per node ID (4,096,000 IDs/s).
var layout41_10_12 = snowflake.Layout{Epoch: snowflake.DefaultEpoch, TimestampBits: 41, NodeBits: 10, SequenceBits: 12}

// startLayoutRegistry is startRegistry (system clock) serving layout l on a pool of
// 64 node IDs.
func startLayoutRegistry(t testing.TB, l snowflake.Layout) *registry {
	t.Helper()
	srv := registrytest.Start(t, registrytest.Options{
		Config: idkeeper.Config{CleanupInterval: time.Hour, Layout: l, Nodes: 64}, Logger: quiet,
		APIKey: registryKey, KeyName: "gateway tests",
	})
	return &registry{url: srv.URL, hc: srv.Client, reg: srv.Registry}
}

// A gateway whose session got another layout than the default from the registry
// issues IDs of that layout: they decode with it to the session's node IDs, are
// sorted and distinct across a millisecond's 4,096 sequence numbers, and
// GET /v1/version names it.
func TestIssueOnLayout41_10_12(t *testing.T) {
	reg := startLayoutRegistry(t, layout41_10_12)
	sess := reg.open(t, 2)
	if l := sess.Layout(); l.String() != layout41_10_12.String() {
		t.Fatalf("session layout %v, want %v", l, layout41_10_12)
	}
	g := startGateway(t, sess, gateway.Options{})
	held := map[int64]bool{}
	for i := range sess.NumGenerators() {
		held[sess.Generator(i).NodeID()] = true
	}
	seen := map[int64]bool{}
	for _, count := range []int{1, 4096, 9000} {
		ids := g.post(fmt.Sprintf(`{"count":%d}`, count)).ids(t)
		if len(ids) != count || !slices.IsSorted(ids) {
			t.Fatalf("count=%d: %d IDs, sorted %v", count, len(ids), slices.IsSorted(ids))
		}
		for _, id := range ids {
			if seen[id] {
				t.Fatalf("ID %d issued twice", id)
			}
			seen[id] = true
			p, err := layout41_10_12.Decode(id)
			if err != nil || !held[p.Node] || p.Sequence > 4095 || time.Since(p.Time) > time.Minute || time.Until(p.Time) > time.Second {
				t.Fatalf("ID %d decodes to %+v, %v; node IDs held %v", id, p, err, held)
			}
		}
	}
	var v struct {
		Layout struct {
			Epoch                                 string
			TimestampBits, NodeBits, SequenceBits int
		}
	}
	if a := g.get("/v1/version"); json.Unmarshal(a.body, &v) != nil || v.Layout.Epoch != "2026-01-01T00:00:00.000Z" ||
		v.Layout.TimestampBits != 41 || v.Layout.NodeBits != 10 || v.Layout.SequenceBits != 12 {
		t.Fatalf("/v1/version: %s", a.body)
	}
}

// BenchmarkGatewayLayout41_10_12 is BenchmarkGatewayCount1000 on layout41_10_12 and
// one node ID: 1,000 IDs per request over HTTP, 8 client goroutines per
// GOMAXPROCS; the ceiling is 4,096,000 IDs/s. Run it for a few seconds
// (-benchtime=3s).
func BenchmarkGatewayLayout41_10_12(b *testing.B) {
	reg := startLayoutRegistry(b, layout41_10_12)
	pr := prometheus.NewRegistry()
	srv := newGateway(b, reg.open(b, 1), gateway.Options{
		Logger: quiet, Registerer: pr, Gatherer: pr, Idempotency: newIdempotency(b, boltIdem(b), false),
	})
	ts := httptest.NewServer(srv.Handler())
	b.Cleanup(ts.Close)
	const count = 1000
	body := fmt.Appendf(nil, `{"count":%d}`, count)
	hc := newLoadClient(256)
	defer hc.CloseIdleConnections()
	b.SetParallelism(benchClients)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := post(hc, ts.URL+"/v1/ids", body, count*19); err != nil {
				b.Error(err)
				return
			}
		}
	})
	elapsed := time.Since(start)
	rate := float64(b.N) * count / elapsed.Seconds()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "req/s")
	b.ReportMetric(rate, "ids/s")
	b.ReportMetric(100*rate/float64(layout41_10_12.IDsPerSecond()), "%ceiling")
}
