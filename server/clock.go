package server

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/alert"
	"github.com/idkeeper/idkeeper/clockcheck"
	"github.com/idkeeper/idkeeper/internal/httpserve"
)

// The server's cluster clock check (issue #13, DESIGN §8, docs/clock.md): with
// ClockConfig.Agent the server proves its clock and the store's against a
// TCKCLK 2 clock agent before it listens and every Interval after; the first
// failure fails it closed for good: it grants nothing, hands back its job locks
// and Serve returns a *ClockLatchedError, for the process to exit with
// ExitClockUnverified and its supervisor to start a fresh one (issue #29).

// clockMaxGap is the longest time without a good sample or store check (at
// least 6 intervals) before the check fails with no-good-sample.
const clockMaxGap = 30 * time.Second

// clockCheck is a running clock check: the monitor and, once the registry and
// the alerts exist, what it tells of a failure.
type clockCheck struct {
	mon   *clockcheck.Monitor
	owner string
	log   *slog.Logger

	mu      sync.Mutex
	reg     *idkeeper.Registry
	alerts  *alerts
	failure *clockcheck.Failure // the latched failure; nil while verified
	// told is closed once a latched failure has been told to the registry (its
	// job locks handed back) and the alerts: the server then exits.
	told     chan struct{}
	tellOnce sync.Once
}

// clockMetrics are the clock check's metrics.
type clockMetrics struct {
	verified prometheus.Gauge
	bound    *prometheus.GaugeVec
	offset   prometheus.Gauge
	rtt      prometheus.Gauge
	failures *prometheus.CounterVec
}

func newClockMetrics(reg prometheus.Registerer) *clockMetrics {
	m := &clockMetrics{
		verified: prometheus.NewGauge(prometheus.GaugeOpts{Name: "idkeeper_clock_verified",
			Help: "1 while the clock agent vouches for this server's clock and the store's, 0 once the check failed (for good: the process exits with status 75 for its supervisor to restart it)."}),
		bound: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "idkeeper_clock_error_bound_seconds",
			Help: "The last good error bound of a clock (own: this server's; store: the store's), which must stay within Δ/2."}, []string{"clock"}),
		offset: prometheus.NewGauge(prometheus.GaugeOpts{Name: "idkeeper_clock_agent_offset_seconds",
			Help: "The clock agent's reference time minus this server's clock at the last good sample."}),
		rtt: prometheus.NewGauge(prometheus.GaugeOpts{Name: "idkeeper_clock_agent_rtt_seconds",
			Help: "The round trip of the last good exchange with the clock agent."}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "idkeeper_clock_check_failures_total",
			Help: "Failed clock checks by reason (a failure other than a store read error fails the server closed)."}, []string{"reason"}),
	}
	for _, r := range clockcheck.Reasons {
		m.failures.WithLabelValues(string(r))
	}
	reg.MustRegister(m.verified, m.bound, m.offset, m.rtt, m.failures)
	return m
}

func (m *clockMetrics) observe(r clockcheck.Round) {
	if r.Err != nil {
		m.failures.WithLabelValues(string(r.Err.Reason)).Inc()
		if r.Latched {
			m.verified.Set(0)
		}
		return
	}
	m.verified.Set(1)
	m.bound.WithLabelValues("own").Set(r.Sample.Bound.Seconds())
	m.offset.Set(r.Sample.Offset.Seconds())
	m.rtt.Set(r.Sample.RTT.Seconds())
	if r.StoreChecked {
		m.bound.WithLabelValues("store").Set(r.StoreBound.Seconds())
	}
}

// startClockCheck starts the clock check of cfg against store: its first sample
// must pass (the agent healthy before anything listens, DESIGN §8), or the
// server does not start. Nil without an agent.
func startClockCheck(cfg ClockConfig, store idkeeper.Store, owner string, promReg prometheus.Registerer, log *slog.Logger) (*clockCheck, error) {
	if cfg.Agent == "" {
		if cfg.Unsafe {
			log.Warn("serving a shared store WITHOUT a clock agent (--unsafe-no-clock-agent): nothing bounds how far the replicas' "+
				"clocks drift apart, and a replica whose clock runs late can reclaim leases early; see docs/clock.md", "store", "shared")
		}
		return nil, nil
	}
	if cfg.Warning != "" {
		log.Warn(cfg.Warning)
	}
	m := newClockMetrics(promReg)
	c := &clockCheck{owner: owner, log: log, told: make(chan struct{})}
	v := &clockcheck.Verifier{Addr: cfg.Agent, Secret: cfg.Secret}
	// A store read that fails is not a clock failure until reads keep failing this
	// long: longer than a Redis failover takes.
	gap := max(clockMaxGap, 6*cfg.Interval)
	mon, err := clockcheck.NewMonitor(v, clockcheck.MonitorConfig{Delta: cfg.Delta, Interval: cfg.Interval, Logger: log, MaxNoGood: gap,
		Observe: m.observe, OnFail: c.failed,
		Store: func(ctx context.Context) (time.Time, time.Duration, error) {
			began := time.Now()
			now, err := store.Now(ctx)
			return now, time.Since(began), err
		}})
	if err != nil {
		return nil, &ConfigError{err}
	}
	c.mon = mon
	if err := mon.Start(context.Background()); err != nil {
		mon.Close()
		return nil, fmt.Errorf("the clock agent %s does not vouch for this server's clock, so it does not start (DESIGN §8: "+
			"agent healthy, then listeners): %w", cfg.Agent, err)
	}
	log.Info("clock verified by the clock agent", "agent", cfg.Agent, "delta", cfg.Delta, "bound", mon.Last().Bound,
		"offset", mon.Last().Offset)
	return c, nil
}

// verifier is the registry's ClockVerifier; nil without a check.
func (c *clockCheck) verifier() idkeeper.ClockVerifier {
	if c == nil {
		return nil
	}
	return c.mon
}

// attach tells a failure, from now on, to reg (which fails closed and releases
// its job locks) and to the alerts; a failure latched before is told now.
func (c *clockCheck) attach(reg *idkeeper.Registry, al *alerts) {
	if c == nil {
		return
	}
	c.mu.Lock()
	c.reg, c.alerts = reg, al
	f := c.failure
	c.mu.Unlock()
	if f != nil {
		c.tell(reg, al, f)
	}
}

func (c *clockCheck) failed(f *clockcheck.Failure) {
	c.mu.Lock()
	c.failure = f
	reg, al := c.reg, c.alerts
	c.mu.Unlock()
	if reg != nil {
		c.tell(reg, al, f)
	}
}

func (c *clockCheck) tell(reg *idkeeper.Registry, al *alerts, f *clockcheck.Failure) {
	c.tellOnce.Do(func() {
		defer close(c.told)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		reg.ClockFailed(ctx, f)
		if al != nil {
			al.al.Notify(alert.ClockUnverified(c.owner, string(f.Reason), f))
		}
	})
}

// latched returns a channel closed once the check has failed and the registry
// has been told (it stopped granting and handed back its job locks): the server
// then exits (Server.Serve). Nil, which never fires, without a check.
func (c *clockCheck) latched() <-chan struct{} {
	if c == nil {
		return nil
	}
	return c.told
}

// latchedFailure is the failure the check latched on; nil while it is verified
// or without a check.
func (c *clockCheck) latchedFailure() *clockcheck.Failure {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.failure
}

// close stops the sampling.
func (c *clockCheck) close() httpserve.Step {
	return httpserve.Step{What: "stop the clock check", Close: func() error {
		if c != nil {
			c.mon.Close()
		}
		return nil
	}}
}

// RegisterJobMetrics registers on reg, as a server does, the metrics of the
// server's own jobs (the backups and the clock check), never set: for a check
// of the metrics' documentation against what the processes export.
func RegisterJobMetrics(reg prometheus.Registerer) {
	newBackupMetrics(reg)
	newClockMetrics(reg)
}
