package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/alert"
	"github.com/idkeeper/idkeeper/clockcheck"
	"github.com/idkeeper/idkeeper/etcd"
)

// The server's cluster clock check (issue #13, DESIGN §8, docs/clock.md): with
// --clock-agent the server proves its clock and the store's against a TCKCLK 2
// clock agent before it listens and every --clock-check-interval after; the
// first failure fails it closed for good: it grants nothing, hands back its job
// locks and exits with exitClockUnverified, for its supervisor to start a fresh
// process (issue #29). On a shared store (Redis, etcd) the agent is required
// unless --unsafe-no-clock-agent says otherwise.

// ClockSecretEnv names the environment variable that may hold the clock agent's
// secret instead of --clock-secret-file (ClockSecretEnv_FILE: a file holding it).
const ClockSecretEnv = "IDKEEPER_CLOCK_SECRET"

// clockMaxGap is the longest time without a good sample or store check (at
// least 6 intervals) before the check fails with no-good-sample.
const clockMaxGap = 30 * time.Second

// DefaultClockDelta is the --clock-delta default: any two verified replicas'
// clocks differ by at most 1 s, each within 500 ms of the agent's reference.
const DefaultClockDelta = time.Second

// clockFlags are the server's clock check flags.
type clockFlags struct {
	agent, secretFile string
	delta, interval   time.Duration
	unsafeNoAgent     bool
}

func (f *clockFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.agent, "clock-agent", "", "HOST:PORT of the TCKCLK 2 clock agent (`idkeeper clock-agent`) that vouches for this server's clock and the store's; "+
		"required on a shared store (Redis, etcd) unless --unsafe-no-clock-agent")
	fs.StringVar(&f.secretFile, "clock-secret-file", "", "file holding the clock agent's secret (at least 32 bytes, apart from every other credential); "+
		ClockSecretEnv+" may hold the secret itself instead")
	fs.DurationVar(&f.delta, "clock-delta", DefaultClockDelta, "Δ: the most two replicas' clocks may differ; every error bound must stay within Δ/2, "+
		"and cleanup waits Δ past expiry + grace; 2ms..60s")
	fs.DurationVar(&f.interval, "clock-check-interval", clockcheck.DefaultInterval, "time between two samples of the clock agent; 100ms..1m")
	fs.BoolVar(&f.unsafeNoAgent, "unsafe-no-clock-agent", false, "serve a shared store (Redis, etcd) without a clock agent: nothing bounds how far "+
		"the replicas' clocks drift apart, and a replica whose clock runs late reclaims leases early (duplicate IDs); logged, and shown in /readyz and the admin")
}

// clockConfig is what the clock flags say; Agent "" means no clock check.
type clockConfig struct {
	Agent    string
	Secret   []byte
	Delta    time.Duration
	Interval time.Duration
	// Unsafe is set for a shared store served without an agent, as asked.
	Unsafe bool
	// Warning is logged at start: a secret file others may read.
	Warning string
}

// config checks the flags against the store: a shared store needs an agent or
// the explicit --unsafe-no-clock-agent.
func (f *clockFlags) config(env lookupEnv, store string) (clockConfig, error) {
	// Every store but a replica's own bolt file may be shared by replicas; on etcd
	// each replica's clock is the time authority, so only the agent bounds them.
	shared := strings.HasPrefix(store, "redis") || etcd.IsURL(store)
	switch {
	case f.agent != "" && f.unsafeNoAgent:
		return clockConfig{}, usagef("--clock-agent and --unsafe-no-clock-agent contradict each other: give one")
	case f.agent == "" && f.secretFile != "":
		return clockConfig{}, usagef("--clock-secret-file needs --clock-agent: the agent it is the secret of")
	case f.agent == "" && shared && !f.unsafeNoAgent:
		return clockConfig{}, usagef("the store %s is shared by replicas: give --clock-agent HOST:PORT and --clock-secret-file "+
			"(or %s), so that every replica proves its clock (DESIGN §8, docs/clock.md); or, knowingly, --unsafe-no-clock-agent",
			redactURL(store), ClockSecretEnv)
	case f.agent == "":
		return clockConfig{Unsafe: shared}, nil
	}
	if err := clockcheck.CheckDelta(f.delta); err != nil {
		return clockConfig{}, usageError{&idkeeper.RangeError{Setting: "clock-delta", Value: f.delta.String(),
			Min: clockcheck.MinDelta.String(), Max: clockcheck.MaxDelta.String()}}
	}
	if f.interval < 100*time.Millisecond || f.interval > time.Minute {
		return clockConfig{}, usageError{&idkeeper.RangeError{Setting: "clock-check-interval", Value: f.interval.String(),
			Min: "100ms", Max: "1m0s"}}
	}
	secret, warning, err := clockSecret(env, f.secretFile)
	if err != nil {
		return clockConfig{}, err
	}
	return clockConfig{Agent: f.agent, Secret: secret, Delta: f.delta, Interval: f.interval, Warning: warning}, nil
}

// clockSecret reads the agent's secret from ClockSecretEnv or from file (the
// --clock-secret-file flag, which ClockSecretEnv_FILE sets as every flag's
// environment variable does); at least clockcheck.MinSecretLen bytes. warning
// says the file is readable by others.
func clockSecret(env lookupEnv, file string) (secret []byte, warning string, err error) {
	s, _ := env(ClockSecretEnv)
	switch {
	case s != "" && file != "":
		return nil, "", usagef("%s and --clock-secret-file both give the clock agent's secret: give one", ClockSecretEnv)
	case s == "" && file == "":
		return nil, "", usagef("--clock-agent needs its secret: --clock-secret-file FILE or %s", ClockSecretEnv)
	case file != "":
		b, warning, err := clockcheck.ReadSecretFile(file)
		if err != nil {
			return nil, "", usagef("--clock-secret-file: %v", err)
		}
		return b, warning, nil
	}
	if len(s) < clockcheck.MinSecretLen {
		return nil, "", usagef("%s must hold at least %d bytes", ClockSecretEnv, clockcheck.MinSecretLen)
	}
	return []byte(s), "", nil
}

// describe says how the clocks are checked, for the log, /readyz and the admin.
func (c clockConfig) describe() string {
	switch {
	case c.Agent != "":
		return fmt.Sprintf("verified by the clock agent %s every %s, Δ %s (every error bound within %s)", c.Agent, c.Interval, c.Delta, c.Delta/2)
	case c.Unsafe:
		return "UNSAFE: a shared store without a clock agent (--unsafe-no-clock-agent): nothing bounds the replicas' clock differences"
	}
	return "not checked by a clock agent: one replica on its own store"
}

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
func startClockCheck(cfg clockConfig, store idkeeper.Store, owner string, promReg prometheus.Registerer, log *slog.Logger) (*clockCheck, error) {
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
		return nil, usageError{err}
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
// then exits (registryServer.wait). Nil, which never fires, without a check.
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
func (c *clockCheck) close() closeStep {
	return closeStep{"stop the clock check", func() error {
		if c != nil {
			c.mon.Close()
		}
		return nil
	}}
}
