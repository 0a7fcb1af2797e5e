package http

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/prometheus/client_golang/prometheus"
)

// poolScrapeTimeout bounds the store query behind the pool gauges at scrape time.
const poolScrapeTimeout = 5 * time.Second

// Metrics is the registry's Prometheus instrumentation. It implements
// idkeeper.Observer: pass it as Config.Observer. Its methods are safe for concurrent
// use and never block.
//
// Series:
//
//	idkeeper_alloc_total{code}                    Alloc calls by outcome; code="OK" on success
//	idkeeper_renew_total{code}                    Renew calls by outcome
//	idkeeper_remove_total{code}                   Remove calls by outcome
//	idkeeper_operation_duration_seconds{op}       latency of alloc, renew, remove (histogram)
//	idkeeper_clock_skew_seconds{op}               server now − client now, signed (histogram)
//	idkeeper_cleanup_runs_total                   cleanup runs that held the job lock
//	idkeeper_cleanup_reclaimed_total              leases reclaimed by cleanup
//	idkeeper_job_lock_overruns_total{job}         jobs that ran past their lock-at-most-for
//	idkeeper_store_resets_total{new_generation}   recoveries from a store reset; new_generation="false" when the store held another replica's
//	idkeeper_registry_phase{phase}                1 for the registry's phase (starting, uninitialised, recovering, ready), else 0
//	idkeeper_store_clock_ok                       1 while the store's clock agrees with this replica's, else 0
//	idkeeper_store_clock_offset_seconds           store clock − this replica's clock, last measured
//	idkeeper_renew_evidence_total{kind}           restored and contested node IDs, ignored evidence (bad_receipt, bare_token)
//	idkeeper_cooling_grants_total                 node IDs newly granted with a window that opens after the grant
//	idkeeper_machine_node_ids{machine_id}         node IDs held by the sessions of a machine ID ┐ for the 10 machine IDs
//	idkeeper_machine_sessions{machine_id}         sessions of a machine ID holding leases       │ holding the most node
//	idkeeper_machine_overdue_sessions{machine_id} of those, sessions that missed a renewal       ┘ IDs (machines.go)
//	idkeeper_machines                             machine IDs whose sessions hold leases
//	idkeeper_audit_dropped_total                  audit entries that never reached the audit log (queue full, append failed)
//	idkeeper_http_rejected_total{route,code}      answers of status ≥ 400 by route name and problem code (rejected.go),
//	                                              counted by a Server whose Options.Metrics is m
//	idkeeper_build_info{version,commit,goversion} 1, registered by that Server (internal/buildinfo)
//
// and, after CollectPool, gauges read from the store at scrape time:
//
//	idkeeper_nodes, idkeeper_nodes_free, idkeeper_nodes_cooling, idkeeper_nodes_leased,
//	idkeeper_nodes_next_ready_timestamp_seconds (only while a node ID cools),
//	idkeeper_nodes_in_grace, idkeeper_nodes_quarantined, idkeeper_store_up,
//	idkeeper_api_key_time_to_expiry_seconds
//
// The names pass promlint (`promtool check metrics`): _total only on counters,
// base units as suffixes. idkeeper_nodes was idkeeper_nodes_total before issue #9.
type Metrics struct {
	reg       prometheus.Registerer
	ops       map[string]*prometheus.CounterVec
	duration  *prometheus.HistogramVec
	skew      *prometheus.HistogramVec
	runs      prometheus.Counter
	reclaimed prometheus.Counter
	overruns  *prometheus.CounterVec
	resets    *prometheus.CounterVec
	phase     *prometheus.GaugeVec
	clockOK   prometheus.Gauge
	offset    prometheus.Gauge
	evidence  *prometheus.CounterVec
	cooling   prometheus.Counter
	machine   machineGauges
	dropped   prometheus.Counter
	reject    *prometheus.CounterVec
	buildOnce sync.Once
}

// phases are the values of the phase label.
var phases = []idkeeper.Phase{idkeeper.PhaseStarting, idkeeper.PhaseUninitialised, idkeeper.PhaseRecovering, idkeeper.PhaseReady,
	idkeeper.PhasePoolMismatch}

var _ idkeeper.Observer = (*Metrics)(nil)

// Operation names the Observer reports.
var operations = []string{"alloc", "renew", "remove"}

// NewMetrics creates the metrics and registers them with reg; it panics, as
// prometheus.MustRegister does, when they are registered there already. A nil reg
// registers nothing (the metrics still count, for tests).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		reg: reg,
		ops: map[string]*prometheus.CounterVec{},
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "idkeeper_operation_duration_seconds",
			Help:    "Latency of registry operations (alloc, renew, remove), store work included.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"op"}),
		skew: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "idkeeper_clock_skew_seconds",
			Help: "Clock skew of clients: server now minus the client's clientUtcNow; positive when the client is behind.",
			Buckets: []float64{-3600, -600, -300, -60, -10, -1, -0.1,
				0.1, 1, 10, 60, 300, 600, 3600},
		}, []string{"op"}),
		runs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "idkeeper_cleanup_runs_total",
			Help: "Cleanup job runs on this replica (runs while another replica held the job lock are not counted).",
		}),
		reclaimed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "idkeeper_cleanup_reclaimed_total",
			Help: "Expired leases reclaimed by the cleanup job after the grace period.",
		}),
		overruns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idkeeper_job_lock_overruns_total",
			Help: "Periodic jobs that ran past their job lock's lock-at-most-for.",
		}, []string{"job"}),
		resets: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idkeeper_store_resets_total",
			Help: "Recoveries from a store reset (lost writes, restore, failover); new_generation=false when the store held another replica's (or a newly initialised) generation.",
		}, []string{"new_generation"}),
		phase: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "idkeeper_registry_phase",
			Help: "1 for the registry's current phase (starting, uninitialised, recovering, ready), 0 for the others.",
		}, []string{"phase"}),
		clockOK: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "idkeeper_store_clock_ok",
			Help: "1 while the store's clock agrees with this replica's within the tolerance, else 0 (no grants, renewals or reclaims).",
		}),
		offset: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "idkeeper_store_clock_offset_seconds",
			Help: "The store's clock minus this replica's, as last measured.",
		}),
		evidence: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idkeeper_renew_evidence_total",
			Help: "What renewals' evidence came to: restored and contested node IDs after a reset; ignored evidence (bad_receipt: a receipt that does not verify; bare_token: a fencing token without a receipt).",
		}, []string{"kind"}),
	}
	m.cooling = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "idkeeper_cooling_grants_total",
		Help: "Node IDs newly granted by Alloc whose window opens after the grant (notBefore after now): their holder waits to mint.",
	})
	m.machine = newMachineGauges()
	m.reject = newRejected()
	m.dropped = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "idkeeper_audit_dropped_total",
		Help: "Audit entries of lease events that never reached the audit log: the queue was full (the store slow or down) or the append failed.",
	})
	cs := []prometheus.Collector{m.duration, m.skew, m.runs, m.reclaimed, m.overruns, m.resets, m.phase, m.clockOK, m.offset,
		m.evidence, m.cooling, m.dropped, m.reject, m.machine.nodes, m.machine.sessions, m.machine.overdue, m.machine.count}
	for _, k := range []string{"restored", "contested", "bad_receipt", "bare_token"} {
		m.evidence.WithLabelValues(k)
	}
	m.Phase(idkeeper.PhaseStarting, true, 0)
	for _, op := range operations {
		v := prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idkeeper_" + op + "_total",
			Help: "Registry " + op + " calls by outcome: code is OK or the error code.",
		}, []string{"code"})
		v.WithLabelValues("OK")
		m.duration.WithLabelValues(op)
		m.ops[op] = v
		cs = append(cs, v)
	}
	m.overruns.WithLabelValues(idkeeper.CleanupJob)
	m.resets.WithLabelValues("true")
	m.resets.WithLabelValues("false")
	if reg != nil {
		reg.MustRegister(cs...)
	}
	return m
}

// Operation implements idkeeper.Observer.
func (m *Metrics) Operation(op string, code idkeeper.Code, elapsed time.Duration) {
	c := string(code)
	if c == "" {
		c = "OK"
	}
	if v, ok := m.ops[op]; ok {
		v.WithLabelValues(c).Inc()
		m.duration.WithLabelValues(op).Observe(elapsed.Seconds())
	}
}

// Skew implements idkeeper.Observer.
func (m *Metrics) Skew(op string, skew time.Duration, _ idkeeper.SkewLevel) {
	m.skew.WithLabelValues(op).Observe(skew.Seconds())
}

// Reclaimed implements idkeeper.Observer.
func (m *Metrics) Reclaimed(n int) {
	m.runs.Inc()
	m.reclaimed.Add(float64(n))
}

// JobLockOverrun implements idkeeper.Observer.
func (m *Metrics) JobLockOverrun(job string, _ time.Duration) {
	m.overruns.WithLabelValues(job).Inc()
}

// StoreReset implements idkeeper.Observer.
func (m *Metrics) StoreReset(newGeneration bool) {
	m.resets.WithLabelValues(strconv.FormatBool(newGeneration)).Inc()
}

// Phase implements idkeeper.Observer.
func (m *Metrics) Phase(p idkeeper.Phase, clockOK bool, offset time.Duration) {
	for _, q := range phases {
		v := 0.0
		if q == p {
			v = 1
		}
		m.phase.WithLabelValues(string(q)).Set(v)
	}
	if clockOK {
		m.clockOK.Set(1)
	} else {
		m.clockOK.Set(0)
	}
	m.offset.Set(offset.Seconds())
}

// Evidence implements idkeeper.Observer.
func (m *Metrics) Evidence(kind string, n int) {
	m.evidence.WithLabelValues(kind).Add(float64(n))
}

// CoolingGrants implements idkeeper.Observer.
func (m *Metrics) CoolingGrants(n int) { m.cooling.Add(float64(n)) }

// Machines implements idkeeper.Observer.
func (m *Metrics) Machines(top []idkeeper.MachineLeases, machines int) { m.machine.set(top, machines) }

// AuditDropped implements idkeeper.Observer.
func (m *Metrics) AuditDropped(n int) { m.dropped.Add(float64(n)) }

// CollectPool registers, with the Registerer given to NewMetrics, gauges of reg's
// node pool that are read with reg.Remaining at every scrape. When the store does not
// answer, or the registry does not serve (it waits for init or recovers a reset),
// idkeeper_store_up is 0 and the pool gauges are left out of that scrape.
// It registers the API-key expiry gauge too (idkeeper_api_key_time_to_expiry_seconds,
// see keyExpiryCollector). It panics when called twice, and does nothing when
// NewMetrics got a nil Registerer.
func (m *Metrics) CollectPool(reg *idkeeper.Registry) {
	if m.reg == nil {
		return
	}
	m.reg.MustRegister(newPoolCollector(reg), newKeyExpiryCollector(reg))
}

type poolCollector struct {
	reg                                           *idkeeper.Registry
	total, free, leased, inGrace, quarantined, up *prometheus.Desc
	cooling, nextReady                            *prometheus.Desc
}

func newPoolCollector(reg *idkeeper.Registry) *poolCollector {
	d := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc("idkeeper_"+name, help, nil, nil)
	}
	return &poolCollector{
		reg:         reg,
		total:       d("nodes", "Node IDs in the pool."),
		free:        d("nodes_free", "Node IDs free and allocatable now (the Remaining count): ready ones and cooling ones."),
		cooling:     d("nodes_cooling", "Free node IDs that are cooling: a grant of one opens its window only later (part of nodes_free)."),
		nextReady:   d("nodes_next_ready_timestamp_seconds", "When the first cooling node ID turns ready (Unix time); absent while none cools."),
		leased:      d("nodes_leased", "Node IDs held by a lease that has not expired."),
		inGrace:     d("nodes_in_grace", "Node IDs held by an expired lease inside the cleanup grace period."),
		quarantined: d("nodes_quarantined", "Free node IDs not allocatable before their quarantine ends."),
		up:          d("store_up", "1 when the registry answered the scrape's pool query (it serves, and its store answers), else 0."),
	}
}

func (c *poolCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.total, c.free, c.cooling, c.nextReady, c.leased, c.inGrace, c.quarantined, c.up} {
		ch <- d
	}
}

func (c *poolCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), poolScrapeTimeout)
	defer cancel()
	n, err := c.reg.Remaining(ctx)
	if err != nil {
		ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 1)
	for _, g := range []struct {
		d *prometheus.Desc
		v int
	}{{c.total, n.Total}, {c.free, n.Remaining}, {c.cooling, n.Cooling}, {c.leased, n.Leased}, {c.inGrace, n.InGrace},
		{c.quarantined, n.Quarantined}} {
		ch <- prometheus.MustNewConstMetric(g.d, prometheus.GaugeValue, float64(g.v))
	}
	if !n.NextReadyAt.IsZero() {
		ch <- prometheus.MustNewConstMetric(c.nextReady, prometheus.GaugeValue, float64(n.NextReadyAt.UnixMilli())/1000)
	}
}
