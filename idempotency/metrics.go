package idempotency

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// statsTimeout bounds the store's Stats call of one scrape.
const statsTimeout = 5 * time.Second

// serviceMetrics are a Service's own counters.
type serviceMetrics struct {
	stored    prometheus.Counter
	exhausted prometheus.Counter
}

func newServiceMetrics() *serviceMetrics {
	return &serviceMetrics{
		stored: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "idkeeper_idempotency_records_stored_total",
			Help: "Answers this process stored for an Idempotency-Key (each one a record, kept for the TTL).",
		}),
		exhausted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "idkeeper_idempotency_records_exhausted_total",
			Help: "Requests with a new Idempotency-Key refused with 429 because their caller held the most records allowed.",
		}),
	}
}

var (
	descRecords = prometheus.NewDesc("idkeeper_idempotency_records",
		"Live Idempotency-Key records in the store (in-flight markers and stored answers), of every caller and process.", nil, nil)
	descBytes = prometheus.NewDesc("idkeeper_idempotency_record_bytes",
		"Size of the live Idempotency-Key records in the store, in bytes (the records, not the store's indexes).", nil, nil)
)

// Collector returns the Prometheus collector of the Service:
//
//	idkeeper_idempotency_records                  gauge: live records in the store, all callers
//	idkeeper_idempotency_record_bytes             gauge: their size in bytes
//	idkeeper_idempotency_records_stored_total     answers this process stored
//	idkeeper_idempotency_records_exhausted_total  requests refused by Config.MaxRecords (429)
//
// The gauges are read from the store at each scrape (CountingStore.Stats, at
// most 5 s); a store that is not a CountingStore has none, and a failing store
// makes the scrape report an error for them. They describe the whole store: every
// process that shares it reports the same values.
func (s *Service) Collector() prometheus.Collector { return collector{s} }

type collector struct{ s *Service }

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	c.s.m.stored.Describe(ch)
	c.s.m.exhausted.Describe(ch)
	if c.s.counting != nil {
		ch <- descRecords
		ch <- descBytes
	}
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	ch <- c.s.m.stored
	ch <- c.s.m.exhausted
	if c.s.counting == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), statsTimeout)
	defer cancel()
	records, bytes, err := c.s.counting.Stats(ctx)
	if err != nil {
		c.s.log.Warn("idempotency store: cannot read its size for /metrics", "err", err)
		ch <- prometheus.NewInvalidMetric(descRecords, err)
		ch <- prometheus.NewInvalidMetric(descBytes, err)
		return
	}
	ch <- prometheus.MustNewConstMetric(descRecords, prometheus.GaugeValue, float64(records))
	ch <- prometheus.MustNewConstMetric(descBytes, prometheus.GaugeValue, float64(bytes))
}
