package clientmetrics_test

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/client"
	"github.com/idkeeper/idkeeper/client/clientmetrics"
	"github.com/idkeeper/idkeeper/client/clienttest"
	"github.com/idkeeper/idkeeper/internal/harness/registrytest"
	"github.com/idkeeper/idkeeper/snowflake"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

const (
	testKey = "idk_test-key-for-the-clientmetrics-tests-0123"
	lease   = idkeeper.DefaultLeaseDuration
)

// open starts a real registry whose clock is the true time of clk (t0 +
// clk.Mono()) and a session of count node IDs on clk, closed at the end of the test.
func open(t *testing.T, clk *clienttest.Clock, count int) *client.Session {
	t.Helper()
	return openWith(t, clk, count, slog.New(slog.DiscardHandler))
}

// openWith is open with the session's logger.
func openWith(t *testing.T, clk *clienttest.Clock, count int, logger *slog.Logger) *client.Session {
	t.Helper()
	srv := registrytest.Start(t, registrytest.Options{
		Config: idkeeper.Config{CleanupInterval: time.Hour}, Clock: func() time.Time { return t0.Add(clk.Mono()) },
		APIKey: testKey,
	})
	s, err := client.New(client.Config{
		ServerURL: srv.URL, APIKey: testKey, HTTPClient: srv.Client, Count: count, Clock: clk,
		MaxBackwardStep: time.Second, Logger: logger,
		Requester: idkeeper.Requester{MachineID: "clientmetrics-test", PID: 1, StartedAt: t0.Add(-time.Hour)},
		OnFatal:   func(err error) { t.Errorf("the session lost its lease: %v", err) },
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Open(ctx); err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// The collector reports IDs minted, exhausted sequences, refused backward steps,
// lease time left and health.
func TestCollector(t *testing.T) {
	clk := clienttest.NewClock(t0)
	s := open(t, clk, 2)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(clientmetrics.NewCollector(s))

	if err := s.Generator(0).NextIDs(make([]int64, 1024)); err != nil { // one whole millisecond
		t.Fatal(err)
	}
	if _, err := s.Generator(1).NextID(); err != nil {
		t.Fatal(err)
	}
	clk.StepWall(-2 * time.Second)
	if _, err := s.Generator(1).NextID(); !errors.Is(err, snowflake.ErrClockBackwards) {
		t.Fatal(err)
	}
	clk.Advance(time.Hour)
	n0, n1 := strconv.FormatInt(s.Leases()[0].NodeID, 10), strconv.FormatInt(s.Leases()[1].NodeID, 10)
	srvURL := s.Stats().Replicas[0].URL
	if !strings.HasPrefix(srvURL, "http://127.0.0.1:") {
		t.Fatalf("replica URL %q", srvURL)
	}
	want := map[string]float64{
		"idkeeper_client_ids_minted_total{node=" + n0 + "}":         1024,
		"idkeeper_client_ids_minted_total{node=" + n1 + "}":         1,
		"idkeeper_client_sequence_exhausted_total{node=" + n0 + "}": 1,
		"idkeeper_client_sequence_exhausted_total{node=" + n1 + "}": 0,
		"idkeeper_client_clock_backwards_total{node=" + n0 + "}":    0,
		"idkeeper_client_clock_backwards_total{node=" + n1 + "}":    1,
		"idkeeper_client_lease_remaining_seconds":                   (lease - time.Hour).Seconds(),
		"idkeeper_client_healthy":                                   1,
		"idkeeper_client_node_ids":                                  2,
		"idkeeper_client_node_id_grows_total":                       0,
		"idkeeper_client_node_id_shrinks_total":                     0,
		"idkeeper_client_issuing_utilization_ratio":                 0,
		"idkeeper_client_registry_failovers_total":                  0,
		// Open's Alloc and Renew, to the one URL.
		"idkeeper_client_registry_requests_total{server=" + srvURL + "}": 2,
		"idkeeper_client_registry_failures_total{server=" + srvURL + "}": 0,
		"idkeeper_client_registry_current{server=" + srvURL + "}":        1,
	}
	if got := gather(t, reg); !maps.Equal(got, want) {
		t.Fatalf("metrics\n got %v\nwant %v", got, want)
	}
	s.Close()
	if got := gather(t, reg); got["idkeeper_client_healthy"] != 0 || got["idkeeper_client_lease_remaining_seconds"] != 0 {
		t.Errorf("after Close: %v", got)
	}
}

// The collector's series pass the ecosystem's lint (promlint, the checks behind
// `promtool check metrics`) with zero problems, before Open, while a lease is held
// and after Close.
func TestCollectorLint(t *testing.T) {
	clk := clienttest.NewClock(t0)
	unopened, err := client.New(client.Config{ServerURL: "http://127.0.0.1:1", APIKey: testKey, Count: 1, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	s := open(t, clk, 3)
	if _, err := s.NextID(); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	prometheus.WrapRegistererWith(prometheus.Labels{"session": "open"}, reg).MustRegister(clientmetrics.NewCollector(s))
	prometheus.WrapRegistererWith(prometheus.Labels{"session": "unopened"}, reg).MustRegister(clientmetrics.NewCollector(unopened))
	lint(t, reg)
	s.Close()
	lint(t, reg)
}

func lint(t *testing.T, g prometheus.Gatherer) {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if len(mfs) == 0 {
		t.Fatal("nothing gathered")
	}
	problems, err := promlint.NewWithMetricFamilies(mfs).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
}

// gather returns every counter and gauge sample of g as "name{label=value,…}" →
// value; histograms: see histograms.
func gather(t *testing.T, g prometheus.Gatherer) map[string]float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetType() == dto.MetricType_HISTOGRAM {
			continue
		}
		for _, m := range mf.GetMetric() {
			key := mf.GetName()
			if len(m.GetLabel()) > 0 {
				var ls []string
				for _, l := range m.GetLabel() {
					ls = append(ls, l.GetName()+"="+l.GetValue())
				}
				key += "{" + strings.Join(ls, ",") + "}"
			}
			v := m.GetCounter().GetValue()
			if m.GetGauge() != nil {
				v = m.GetGauge().GetValue()
			}
			out[key] = v
		}
	}
	return out
}
