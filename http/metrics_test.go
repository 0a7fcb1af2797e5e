package http_test

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/idkeeper/idkeeper"
	idkhttp "github.com/idkeeper/idkeeper/http"
	"github.com/idkeeper/idkeeper/protocol"
)

// metricValue reads one counter, gauge or histogram count from the harness's
// registry; the labels are name, value pairs.
func metricValue(t *testing.T, h *harness, name string, labels ...string) float64 {
	t.Helper()
	return gathered(t, h.prom, name, labels...)
}

// gathered reads one counter, gauge or histogram count (for a histogram with
// labels "sum", "": its sum) from g; the labels are name, value pairs.
func gathered(t *testing.T, g prometheus.Gatherer, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := len(labels) >= 2 && labels[len(labels)-2] == "sum"
	if sum {
		labels = labels[:len(labels)-2]
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				if !hasLabel(m, labels[i], labels[i+1]) {
					continue next
				}
			}
			switch {
			case m.Counter != nil:
				return m.Counter.GetValue()
			case m.Gauge != nil:
				return m.Gauge.GetValue()
			case m.Histogram != nil && sum:
				return m.Histogram.GetSampleSum()
			case m.Histogram != nil:
				return float64(m.Histogram.GetSampleCount())
			}
		}
	}
	t.Fatalf("no metric %s%v", name, labels)
	return 0
}

func hasLabel(m *dto.Metric, name, value string) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == name && l.GetValue() == value {
			return true
		}
	}
	return false
}

func TestMetrics(t *testing.T) {
	h := newBolt(t)
	who := requesterJSON(1)
	h.post("/v1/leases", `{"requester":`+who+`,"count":2,"clientUtcNow":"`+ts(start.Add(-time.Hour))+`"}`).problem(t, protocol.CodeClockSkewTooLarge)
	h.post("/v1/leases", `{"requester":`+who+`,"count":2,"clientUtcNow":"`+ts(start.Add(-time.Second))+`"}`).ok(t)
	h.post("/v1/leases/renew", `{"requester":`+who+`}`).ok(t)
	h.post("/v1/leases", `{"requester":`+requesterJSON(2)+`,"count":1}`).ok(t)

	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"idkeeper_alloc_total", []string{"code", "OK"}, 2},
		{"idkeeper_alloc_total", []string{"code", "CLOCK_SKEW_TOO_LARGE"}, 1},
		{"idkeeper_renew_total", []string{"code", "OK"}, 1},
		{"idkeeper_remove_total", []string{"code", "OK"}, 0},
		{"idkeeper_operation_duration_seconds", []string{"op", "alloc"}, 3},
		{"idkeeper_clock_skew_seconds", []string{"op", "alloc"}, 2},
		{"idkeeper_nodes", nil, 4096},
		{"idkeeper_nodes_leased", nil, 3},
		{"idkeeper_nodes_free", nil, 4093},
		{"idkeeper_nodes_in_grace", nil, 0},
		{"idkeeper_nodes_quarantined", nil, 0},
		{"idkeeper_store_up", nil, 1},
	} {
		if got := metricValue(t, h, c.name, c.labels...); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}

	// Requester 2's first lease (10 min) expires; inside the grace period it counts
	// as in grace, after it cleanup reclaims it.
	h.clk.Advance(15 * time.Minute)
	if got := metricValue(t, h, "idkeeper_nodes_in_grace"); got != 1 {
		t.Fatalf("in grace %v", got)
	}
	h.clk.Advance(10 * time.Minute)
	if n, ran, err := h.reg.Cleanup(context.Background()); err != nil || !ran || n != 1 {
		t.Fatalf("cleanup: %d %v %v", n, ran, err)
	}
	if got := metricValue(t, h, "idkeeper_cleanup_reclaimed_total"); got != 1 {
		t.Fatalf("reclaimed %v", got)
	}

	// /metrics serves the text format with all of it.
	r := h.get("/metrics", "X-API-Key", "")
	if r.status != 200 {
		t.Fatalf("/metrics: %d", r.status)
	}
	for _, s := range []string{`idkeeper_alloc_total{code="OK"} 2`, `idkeeper_nodes_leased 2`, `idkeeper_cleanup_reclaimed_total 1`, `idkeeper_clock_skew_seconds_bucket{op="alloc",le="-1"}`} {
		if !strings.Contains(string(r.raw), s) {
			t.Errorf("/metrics lacks %q", s)
		}
	}
}

// Every Observer method moves its metric, by name, labels and value; an
// operation the metrics do not know is dropped, not counted under a new label.
func TestMetricsObserver(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := idkhttp.NewMetrics(reg)
	m.Operation("alloc", "", 2*time.Millisecond)
	m.Operation("alloc", protocol.CodeNodeIDsExhausted, time.Millisecond)
	m.Operation("unknown-op", protocol.CodeInternal, time.Millisecond)
	m.Skew("renew", -3*time.Second, idkeeper.SkewWarn)
	m.Reclaimed(3)
	m.Reclaimed(0)
	m.JobLockOverrun(idkeeper.CleanupJob, time.Second)
	m.JobLockOverrun(idkeeper.CleanupJob, 2*time.Second)
	m.JobLockOverrun("backup", time.Second)
	m.StoreReset(false)
	m.Phase(idkeeper.PhaseRecovering, false, -1500*time.Millisecond)
	m.Evidence("restored", 4)
	m.CoolingGrants(2)
	m.AuditDropped(5)
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"idkeeper_alloc_total", []string{"code", "OK"}, 1},
		{"idkeeper_alloc_total", []string{"code", "NODE_IDS_EXHAUSTED"}, 1},
		{"idkeeper_renew_total", []string{"code", "OK"}, 0},
		{"idkeeper_operation_duration_seconds", []string{"op", "alloc"}, 2},
		{"idkeeper_operation_duration_seconds", []string{"op", "alloc", "sum", ""}, 0.003},
		{"idkeeper_clock_skew_seconds", []string{"op", "renew"}, 1},
		{"idkeeper_clock_skew_seconds", []string{"op", "renew", "sum", ""}, -3},
		{"idkeeper_cleanup_runs_total", nil, 2},
		{"idkeeper_cleanup_reclaimed_total", nil, 3},
		{"idkeeper_job_lock_overruns_total", []string{"job", idkeeper.CleanupJob}, 2},
		{"idkeeper_job_lock_overruns_total", []string{"job", "backup"}, 1},
		{"idkeeper_store_resets_total", []string{"new_generation", "false"}, 1},
		{"idkeeper_store_resets_total", []string{"new_generation", "true"}, 0},
		{"idkeeper_registry_phase", []string{"phase", string(idkeeper.PhaseRecovering)}, 1},
		{"idkeeper_registry_phase", []string{"phase", string(idkeeper.PhaseStarting)}, 0},
		{"idkeeper_store_clock_ok", nil, 0},
		{"idkeeper_store_clock_offset_seconds", nil, -1.5},
		{"idkeeper_renew_evidence_total", []string{"kind", "restored"}, 4},
		{"idkeeper_renew_evidence_total", []string{"kind", "contested"}, 0},
		{"idkeeper_cooling_grants_total", nil, 2},
		{"idkeeper_audit_dropped_total", nil, 5},
	} {
		if got := gathered(t, reg, c.name, c.labels...); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, mt := range mf.GetMetric() {
			for _, l := range mt.GetLabel() {
				if l.GetValue() == "unknown-op" || l.GetValue() == string(protocol.CodeInternal) {
					t.Errorf("%s counted the unknown operation: %v", mf.GetName(), mt.GetLabel())
				}
			}
		}
	}
	idkhttp.NewMetrics(nil).CollectPool(nil) // a no-op without a Registerer: no panic
}
