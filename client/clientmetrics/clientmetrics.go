// Package clientmetrics exports the metrics of a client.Session to Prometheus.
//
// It is a package of its own so that a program that embeds the client library
// without Prometheus does not compile Prometheus (nor protobuf): the client package
// exposes its counters through Session.Stats, and only this package turns them into
// series.
//
//	reg := prometheus.NewRegistry()
//	reg.MustRegister(clientmetrics.NewCollector(s))
package clientmetrics

import (
	"strconv"

	"github.com/idkeeper/idkeeper/client"
	"github.com/prometheus/client_golang/prometheus"
)

// NewCollector returns a Prometheus collector of the session's metrics. Per node ID
// (label "node"):
//
//	idkeeper_client_ids_minted_total              IDs minted
//	idkeeper_client_sequence_exhausted_total      milliseconds whose whole sequence was
//	                                              used; a call in the same millisecond
//	                                              then waited for the next one
//	idkeeper_client_clock_backwards_total         calls refused because the wall clock
//	                                              stepped back past MaxBackwardStep
//
// and for the session:
//
//	idkeeper_client_lease_remaining_seconds       time until the lease deadline (0: none)
//	idkeeper_client_healthy                       1 when Check passes, else 0
//
// The names pass promlint (`promtool check metrics`). Before issue #9 the collector
// was client.NewCollector and idkeeper_client_lease_remaining_seconds was
// idkeeper_client_lease_seconds_left.
//
// Register one collector per session; to tell sessions apart, register with
// prometheus.WrapRegistererWith and a distinguishing label. Collecting reads only
// Session.Stats: atomic counters and the clock.
func NewCollector(s *client.Session) prometheus.Collector { return &collector{s: s} }

var (
	mintedDesc = prometheus.NewDesc("idkeeper_client_ids_minted_total",
		"IDs minted by the generator of this node ID.", []string{"node"}, nil)
	exhaustedDesc = prometheus.NewDesc("idkeeper_client_sequence_exhausted_total",
		"Milliseconds in which the generator used its whole sequence; further calls in that millisecond waited for the next.",
		[]string{"node"}, nil)
	backwardsDesc = prometheus.NewDesc("idkeeper_client_clock_backwards_total",
		"Issuing calls refused because the wall clock was behind the last minted timestamp by more than the tolerated step.",
		[]string{"node"}, nil)
	remainingDesc = prometheus.NewDesc("idkeeper_client_lease_remaining_seconds",
		"Seconds until the lease deadline on the monotonic clock; 0 when no valid lease is held.", nil, nil)
	healthyDesc = prometheus.NewDesc("idkeeper_client_healthy",
		"1 when the session can issue IDs (the health check), else 0.", nil, nil)
)

type collector struct{ s *client.Session }

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{mintedDesc, exhaustedDesc, backwardsDesc, remainingDesc, healthyDesc} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	st := c.s.Stats()
	for _, g := range st.Generators {
		label := strconv.FormatInt(g.NodeID, 10)
		ch <- prometheus.MustNewConstMetric(mintedDesc, prometheus.CounterValue, float64(g.Minted), label)
		ch <- prometheus.MustNewConstMetric(exhaustedDesc, prometheus.CounterValue, float64(g.SequenceExhausted), label)
		ch <- prometheus.MustNewConstMetric(backwardsDesc, prometheus.CounterValue, float64(g.ClockBackwards), label)
	}
	ch <- prometheus.MustNewConstMetric(remainingDesc, prometheus.GaugeValue, st.TimeLeft.Seconds())
	healthy := 0.0
	if st.Healthy {
		healthy = 1
	}
	ch <- prometheus.MustNewConstMetric(healthyDesc, prometheus.GaugeValue, healthy)
}
