package http

import (
	"context"
	"math"

	"github.com/idkeeper/idkeeper"
	"github.com/prometheus/client_golang/prometheus"
)

// keyExpiryCollector is the gauge idkeeper_api_key_time_to_expiry_seconds, read
// from the store at scrape time (idkeeper.Registry.ExpiringKeys): the seconds
// until the earliest expiry of an API key in use (idkeeper.Registry.InUse),
// negative once that key has expired, +Inf when no key in use expires. It is left
// out of a scrape while the registry does not serve or its store does not answer
// (idkeeper_store_up tells those apart), so it is never NaN and never stale data.
// +Inf rather than no series keeps `< threshold` alerts quiet without hiding the
// series, which `absent()` can then watch.
type keyExpiryCollector struct {
	reg  *idkeeper.Registry
	desc *prometheus.Desc
}

func newKeyExpiryCollector(reg *idkeeper.Registry) *keyExpiryCollector {
	return &keyExpiryCollector{reg: reg, desc: prometheus.NewDesc("idkeeper_api_key_time_to_expiry_seconds",
		"Seconds until the earliest expiry of an API key in use (not revoked; holding leases, or used within the lease "+
			"duration + grace); negative once it has expired; +Inf when no key in use expires.", nil, nil)}
}

func (c *keyExpiryCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *keyExpiryCollector) Collect(ch chan<- prometheus.Metric) {
	if c.reg.Serving() != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), poolScrapeTimeout)
	defer cancel()
	keys, now, err := c.reg.ExpiringKeys(ctx)
	if err != nil {
		return
	}
	v := math.Inf(1)
	if len(keys) > 0 {
		v = keys[0].Key.ExpiresAt.Sub(now).Seconds()
	}
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, v)
}
