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
	"github.com/idkeeper/idkeeper/snowflake"
	"github.com/prometheus/client_golang/prometheus"
)

// NewCollector returns a Prometheus collector of the session's metrics. Per node ID
// (label "node"):
//
//	idkeeper_client_ids_minted_total                    IDs minted
//	idkeeper_client_sequence_exhausted_total            milliseconds whose whole sequence was
//	                                                    used; a call in the same millisecond
//	                                                    then had to wait for the next one (an
//	                                                    upper bound of the waits)
//	idkeeper_client_sequence_wait_seconds               histogram: one observation per wait for
//	                                                    a later millisecond, its real duration
//	idkeeper_client_clock_backwards_total               calls refused because the wall clock
//	                                                    stepped back past MaxBackwardStep
//	idkeeper_client_clock_rollback_seconds              histogram: one observation per backward
//	                                                    step of the wall clock the generator
//	                                                    found, its width when found
//	idkeeper_client_clock_rollback_duration_seconds     histogram: one observation per step the
//	                                                    clock recovered from, how long it was
//	                                                    behind
//
// and for the session:
//
//	idkeeper_client_lease_remaining_seconds       time until the lease deadline (0: none)
//	idkeeper_client_healthy                       1 when Check passes, else 0
//	idkeeper_client_node_ids                      node IDs held now, extra sessions leased
//	                                              on demand included (Config.MaxCount)
//	idkeeper_client_node_id_grows_total           times more node IDs were leased on demand
//	idkeeper_client_node_id_shrinks_total         times node IDs were given back (idle) or
//	                                              dropped (an extra session's lease lost)
//	idkeeper_client_issuing_utilization_ratio     the last one-second sample's share of the
//	                                              ceiling (0 when not leasing on demand)
//	idkeeper_client_registry_failovers_total      moves to the next registry replica within
//	                                              one call (Config.ServerURLs)
//
// and per registry URL (label "server", Config.ServerURL or each of ServerURLs):
//
//	idkeeper_client_registry_requests_total       Alloc, Renew and Remove requests sent to it
//	idkeeper_client_registry_failures_total       those that failed with a transport error or
//	                                              a 5xx (and moved the call on)
//	idkeeper_client_registry_current              1 for the replica tried first, else 0
//
// The histograms are the design's clock_rollback_ms and sequence_wait_ms, in
// Prometheus's base unit: their bucket bounds are whole (or, for waits, fractions
// of) milliseconds, from the generator's fixed buckets (snowflake.Stats). The names
// pass promlint (`promtool check metrics`), which rejects _ms and _milliseconds.
// Before issue #9 the collector was client.NewCollector and
// idkeeper_client_lease_remaining_seconds was idkeeper_client_lease_seconds_left.
//
// Register one collector per session; to tell sessions apart, register with
// prometheus.WrapRegistererWith and a distinguishing label. Collecting reads only
// Session.Stats: atomic counters and the clock.
func NewCollector(s *client.Session) prometheus.Collector { return &collector{s: s} }

var (
	mintedDesc = prometheus.NewDesc("idkeeper_client_ids_minted_total",
		"IDs minted by the generator of this node ID.", []string{"node"}, nil)
	exhaustedDesc = prometheus.NewDesc("idkeeper_client_sequence_exhausted_total",
		"Milliseconds in which the generator used its whole sequence; further calls in that millisecond had to wait for the next.",
		[]string{"node"}, nil)
	waitDesc = prometheus.NewDesc("idkeeper_client_sequence_wait_seconds",
		"Waits of issuing calls for a later millisecond (its sequence used up, or the wall clock behind the last minted timestamp), in real time.",
		[]string{"node"}, nil)
	backwardsDesc = prometheus.NewDesc("idkeeper_client_clock_backwards_total",
		"Issuing calls refused because the wall clock was behind the last minted timestamp by more than the tolerated step.",
		[]string{"node"}, nil)
	rollbackDesc = prometheus.NewDesc("idkeeper_client_clock_rollback_seconds",
		"Backward steps of the wall clock the generator found (absorbed with logical time or refused): how far behind the last minted timestamp, when found.",
		[]string{"node"}, nil)
	rollbackDurDesc = prometheus.NewDesc("idkeeper_client_clock_rollback_duration_seconds",
		"Backward steps of the wall clock that ended: how long, in real time, the clock took to reach the last minted timestamp again.",
		[]string{"node"}, nil)
	remainingDesc = prometheus.NewDesc("idkeeper_client_lease_remaining_seconds",
		"Seconds until the lease deadline on the monotonic clock; 0 when no valid lease is held.", nil, nil)
	healthyDesc = prometheus.NewDesc("idkeeper_client_healthy",
		"1 when the session can issue IDs (the health check), else 0.", nil, nil)
	nodeIDsDesc = prometheus.NewDesc("idkeeper_client_node_ids",
		"Node IDs the session mints with now, those of extra sessions leased on demand included.", nil, nil)
	growsDesc = prometheus.NewDesc("idkeeper_client_node_id_grows_total",
		"Times the session leased more node IDs on demand, as an extra session.", nil, nil)
	shrinksDesc = prometheus.NewDesc("idkeeper_client_node_id_shrinks_total",
		"Times the session gave node IDs back (issuing idle) or dropped an extra session that lost its lease.", nil, nil)
	failoversDesc = prometheus.NewDesc("idkeeper_client_registry_failovers_total",
		"Moves from a registry replica that failed (transport error or 5xx) to the next one within one Alloc, Renew or Remove.", nil, nil)
	registryRequestsDesc = prometheus.NewDesc("idkeeper_client_registry_requests_total",
		"Alloc, Renew and Remove requests sent to this registry URL.", []string{"server"}, nil)
	registryFailuresDesc = prometheus.NewDesc("idkeeper_client_registry_failures_total",
		"Requests to this registry URL that failed with a transport error or a 5xx answer.", []string{"server"}, nil)
	registryCurrentDesc = prometheus.NewDesc("idkeeper_client_registry_current",
		"1 for the registry URL the next request goes to first (the one that answered last), else 0.", []string{"server"}, nil)
	utilizationDesc = prometheus.NewDesc("idkeeper_client_issuing_utilization_ratio",
		"Share of the ceiling (node IDs held times the layout's IDs per second) minted in the last one-second sample; 0 when not leasing on demand.", nil, nil)
)

type collector struct{ s *client.Session }

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{mintedDesc, exhaustedDesc, waitDesc, backwardsDesc, rollbackDesc, rollbackDurDesc,
		remainingDesc, healthyDesc, nodeIDsDesc, growsDesc, shrinksDesc, utilizationDesc,
		failoversDesc, registryRequestsDesc, registryFailuresDesc, registryCurrentDesc} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	st := c.s.Stats()
	for _, g := range st.Generators {
		label := strconv.FormatInt(g.NodeID, 10)
		ch <- prometheus.MustNewConstMetric(mintedDesc, prometheus.CounterValue, float64(g.Minted), label)
		ch <- prometheus.MustNewConstMetric(exhaustedDesc, prometheus.CounterValue, float64(g.SequenceExhausted), label)
		ch <- histogram(waitDesc, g.SequenceWaits, label)
		ch <- prometheus.MustNewConstMetric(backwardsDesc, prometheus.CounterValue, float64(g.ClockBackwards), label)
		ch <- histogram(rollbackDesc, g.ClockRollbacks, label)
		ch <- histogram(rollbackDurDesc, g.ClockRollbackDurations, label)
	}
	ch <- prometheus.MustNewConstMetric(remainingDesc, prometheus.GaugeValue, st.TimeLeft.Seconds())
	healthy := 0.0
	if st.Healthy {
		healthy = 1
	}
	ch <- prometheus.MustNewConstMetric(healthyDesc, prometheus.GaugeValue, healthy)
	ch <- prometheus.MustNewConstMetric(nodeIDsDesc, prometheus.GaugeValue, float64(st.Demand.NodeIDs))
	ch <- prometheus.MustNewConstMetric(growsDesc, prometheus.CounterValue, float64(st.Demand.Grows))
	ch <- prometheus.MustNewConstMetric(shrinksDesc, prometheus.CounterValue, float64(st.Demand.Shrinks))
	ch <- prometheus.MustNewConstMetric(utilizationDesc, prometheus.GaugeValue, st.Demand.Utilization)
	ch <- prometheus.MustNewConstMetric(failoversDesc, prometheus.CounterValue, float64(st.Failovers))
	for _, r := range st.Replicas {
		ch <- prometheus.MustNewConstMetric(registryRequestsDesc, prometheus.CounterValue, float64(r.Requests), r.URL)
		ch <- prometheus.MustNewConstMetric(registryFailuresDesc, prometheus.CounterValue, float64(r.Failures), r.URL)
		current := 0.0
		if r.Current {
			current = 1
		}
		ch <- prometheus.MustNewConstMetric(registryCurrentDesc, prometheus.GaugeValue, current, r.URL)
	}
}

// histogram turns a generator's histogram snapshot into a Prometheus histogram in
// seconds, with cumulative buckets.
func histogram(d *prometheus.Desc, h snowflake.Histogram, label string) prometheus.Metric {
	buckets := make(map[float64]uint64, len(h.Bounds))
	var cum uint64
	for i, b := range h.Bounds {
		cum += h.Counts[i]
		buckets[b.Seconds()] = cum
	}
	return prometheus.MustNewConstHistogram(d, h.Count, h.Sum.Seconds(), buckets, label)
}
