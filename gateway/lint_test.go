package gateway_test

import (
	"bytes"
	"net/http"
	"strings"
	"testing"

	"github.com/idkeeper/idkeeper/client/clientmetrics"
	"github.com/idkeeper/idkeeper/gateway"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
)

// The gateway's /metrics passes the ecosystem's lint (promlint, the checks behind
// `promtool check metrics`) with zero problems: the gateway's series after every
// kind of answer (fresh, replayed, refused), its idempotency metrics, the session's
// collector and the Go, process and build-info collectors, registered as the
// idkeeper binary registers them.
func TestMetricsLint(t *testing.T) {
	reg := startRegistry(t, nil)
	cfg := reg.config(t, 2, nil)
	cfg.MaxCount = 4 // node IDs on demand: their gauge and counters too
	sess := openSession(t, cfg)
	pr := prometheus.NewRegistry()
	pr.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		collectors.NewBuildInfoCollector(),
		clientmetrics.NewCollector(sess),
	)
	g := startGateway(t, sess, gateway.Options{
		Idempotency: newIdempotency(t, boltIdem(t), false),
		Registerer:  pr, Gatherer: pr,
	})
	g.post(`{"count":7}`).ids(t)
	g.post(`{"count":3}`, "Idempotency-Key", `"lint-1"`).ids(t)
	g.post(`{"count":3}`, "Idempotency-Key", `"lint-1"`).ids(t) // replayed
	g.post(`{"count":4}`, "Idempotency-Key", `"lint-1"`)        // 422: another request
	g.post(`{"count":0}`)                                       // 400
	for _, path := range []string{"/v1/ids/12345", "/v1/version", "/health", "/livez", "/readyz", "/nowhere"} {
		g.get(path)
	}
	g.do(http.MethodDelete, "/v1/ids", "")

	a := g.get("/metrics")
	if a.status != http.StatusOK {
		t.Fatalf("/metrics: %d", a.status)
	}
	for _, want := range []string{"idkeeper_gateway_requests_total", "idkeeper_gateway_idempotent_replays_total 1",
		"idkeeper_client_ids_minted_total", "idkeeper_client_sequence_wait_seconds_bucket",
		"idkeeper_client_clock_rollback_seconds_bucket", "idkeeper_client_clock_rollback_duration_seconds_bucket",
		"idkeeper_client_node_ids 2", "idkeeper_client_node_id_grows_total", "idkeeper_client_issuing_utilization_ratio",
		"go_goroutines"} {
		if !strings.Contains(string(a.body), want) {
			t.Fatalf("/metrics lacks %q:\n%s", want, a.body)
		}
	}
	problems, err := promlint.New(bytes.NewReader(a.body)).Lint()
	if err != nil {
		t.Fatalf("promlint: %v", err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
}
