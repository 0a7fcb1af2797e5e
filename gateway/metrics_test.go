package gateway_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper/client/clientmetrics"
	"github.com/idkeeper/idkeeper/client/clienttest"
	"github.com/idkeeper/idkeeper/gateway"
	"github.com/prometheus/client_golang/prometheus"
)

// The gateway's /metrics, registered as the idkeeper binary registers it, exposes
// its generator's own signals (issue #21) beside the lease time left: a backward
// step of the wall clock (width and duration histograms) and the waits of a
// request that needed a second millisecond.
func TestMetricsClockRollbackAndSequenceWaits(t *testing.T) {
	clk := clienttest.NewClock(t0)
	reg := startRegistry(t, func() time.Time { return t0.Add(clk.Mono()) })
	cfg := reg.config(t, 1, nil)
	cfg.Clock = clk
	sess := openSession(t, cfg)
	pr := prometheus.NewRegistry()
	pr.MustRegister(clientmetrics.NewCollector(sess))
	g := startGateway(t, sess, gateway.Options{Registerer: pr, Gatherer: pr})

	g.post(`{"count":1}`).ids(t)
	clk.StepWall(-300 * time.Millisecond)
	for range 3 {
		g.post(`{"count":1}`).ids(t) // at logical time
	}
	clk.StepWall(302 * time.Millisecond)
	g.post(`{"count":1}`).ids(t) // a later millisecond: the clock caught up

	// 1,500 IDs need two milliseconds of the one node ID.
	go func() {
		time.Sleep(20 * time.Millisecond)
		clk.StepWall(time.Millisecond)
	}()
	if ids := g.post(`{"count":1500}`).ids(t); len(ids) != 1500 {
		t.Fatalf("%d IDs", len(ids))
	}

	a := g.get("/metrics")
	node := `node="` + strconv.FormatInt(sess.Leases()[0].NodeID, 10) + `"`
	for _, want := range []string{
		"idkeeper_client_clock_rollback_seconds_bucket{" + node + `,le="0.25"} 0`,
		"idkeeper_client_clock_rollback_seconds_bucket{" + node + `,le="0.5"} 1`,
		"idkeeper_client_clock_rollback_seconds_sum{" + node + "} 0.3\n",
		"idkeeper_client_clock_rollback_seconds_count{" + node + "} 1\n",
		"idkeeper_client_clock_rollback_duration_seconds_count{" + node + "} 1\n",
		"idkeeper_client_clock_backwards_total{" + node + "} 0\n",
		"idkeeper_client_sequence_wait_seconds_count{" + node + "} 1\n",
		"idkeeper_client_sequence_wait_seconds_bucket{" + node + `,le="0.01"} 0`,
		"idkeeper_client_sequence_wait_seconds_bucket{" + node + `,le="5"} 1`,
		"idkeeper_client_lease_remaining_seconds ",
	} {
		if !strings.Contains(string(a.body), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if t.Failed() {
		t.Logf("/metrics:\n%s", a.body)
	}
}
