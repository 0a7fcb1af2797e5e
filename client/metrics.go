package client

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// NewCollector returns a Prometheus collector of the session's metrics. Per node ID
// (label "node"):
//
//	idkeeper_client_ids_minted_total              IDs handed out
//	idkeeper_client_sequence_exhausted_total      milliseconds whose whole sequence was
//	                                              used; a call in the same millisecond
//	                                              then waited for the next one
//	idkeeper_client_clock_backwards_total         calls refused because the wall clock
//	                                              stepped back past MaxBackwardStep
//
// and for the session:
//
//	idkeeper_client_lease_seconds_left            time until the lease deadline (0: none)
//	idkeeper_client_healthy                       1 when Check passes, else 0
//
// Register one collector per session; to tell sessions apart, register with
// prometheus.WrapRegistererWith and a distinguishing label. Collecting reads only
// atomic counters and the clock.
func NewCollector(s *Session) prometheus.Collector { return &collector{s: s} }

var (
	mintedDesc = prometheus.NewDesc("idkeeper_client_ids_minted_total",
		"IDs handed out by the generator of this node ID.", []string{"node"}, nil)
	exhaustedDesc = prometheus.NewDesc("idkeeper_client_sequence_exhausted_total",
		"Milliseconds in which the generator used its whole sequence; further calls in that millisecond waited for the next.",
		[]string{"node"}, nil)
	backwardsDesc = prometheus.NewDesc("idkeeper_client_clock_backwards_total",
		"Issuing calls refused because the wall clock was behind the last minted timestamp by more than the tolerated step.",
		[]string{"node"}, nil)
	leftDesc = prometheus.NewDesc("idkeeper_client_lease_seconds_left",
		"Seconds until the lease deadline on the monotonic clock; 0 when no valid lease is held.", nil, nil)
	healthyDesc = prometheus.NewDesc("idkeeper_client_healthy",
		"1 when the session can issue IDs (the health check), else 0.", nil, nil)
)

type collector struct{ s *Session }

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{mintedDesc, exhaustedDesc, backwardsDesc, leftDesc, healthyDesc} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	for _, g := range c.s.gens {
		node := g.NodeID()
		if node < 0 {
			continue
		}
		label := strconv.FormatInt(node, 10)
		ch <- prometheus.MustNewConstMetric(mintedDesc, prometheus.CounterValue, float64(g.minted.Load()), label)
		ch <- prometheus.MustNewConstMetric(exhaustedDesc, prometheus.CounterValue, float64(g.exhausted.Load()), label)
		ch <- prometheus.MustNewConstMetric(backwardsDesc, prometheus.CounterValue, float64(g.backwards.Load()), label)
	}
	ch <- prometheus.MustNewConstMetric(leftDesc, prometheus.GaugeValue, c.s.TimeLeft().Seconds())
	healthy := 0.0
	if c.s.Healthy() {
		healthy = 1
	}
	ch <- prometheus.MustNewConstMetric(healthyDesc, prometheus.GaugeValue, healthy)
}
