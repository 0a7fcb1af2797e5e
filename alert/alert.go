// Package alert sends IdKeeper's alerts to the Discord webhooks the admin web's
// users set on their profile (issue #11, docs/alerts.md).
//
// Two alerts are state-based: capacity (free node IDs below a share of the pool)
// and clock skew (requesters whose last observation the registry judged warn or
// reject). Their state lives in the store (StateStore) and every run
// takes the store's job lock, so replicas sharing a store send each message once:
// a message when the condition is found, the same again every Repeat while it
// holds, and a "resolved" message once it clears. The others are events, sent at
// once: a store reset recovered, the store's clock disagreeing with a registry's
// (the clock guard), a job that overran its lock, a scheduled backup that failed.
//
// Every delivery, to every webhook, is counted in idkeeper_alert_deliveries_total
// and written to the audit log; a webhook's token is never logged.
package alert

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/account"
	"github.com/idkeeper/idkeeper/discord"
)

// Defaults of Config.
const (
	DefaultCapacityThreshold = 0.10
	DefaultRepeat            = time.Hour
	DefaultInterval          = time.Minute
	DefaultSendTimeout       = 2 * time.Minute
	DefaultEventQuiet        = 10 * time.Minute

	// Job is the name of the job lock the state-based alerts run under.
	Job = "alerts"
	// jobLockFor is the alert job's lock-at-most-for: longer than SendTimeout, so
	// the lock outlasts a run's deliveries.
	jobLockFor = 5 * time.Minute
	// eventQueue is how many events may wait for delivery; more are dropped
	// (logged and counted) so that the registry never waits for Discord.
	eventQueue = 32
)

// Names of the alerts, in State.Name, messages and metrics.
const (
	Capacity     = NameCapacity
	ClockSkew    = NameClockSkew
	StoreReset   = "store-reset"
	ClockGuard   = "clock-guard"
	LockOverrun  = "job-lock-overrun"
	BackupFailed = "backup-failed"
	ClockCheck   = "clock-unverified"
)

// Store is what the alerts keep in the store: their state, the job lock, and the
// accounts whose webhooks they go to. bolt and redis stores satisfy it.
type Store interface {
	StateStore
	TryLock(ctx context.Context, name, owner string, atMostFor time.Duration) (idkeeper.Lock, bool, error)
	Unlock(ctx context.Context, name, owner string, atLeastFor time.Duration) (bool, error)
	Users(ctx context.Context) ([]account.User, error)
}

// Source is what the state-based alerts read; *idkeeper.Registry satisfies it.
type Source interface {
	Remaining(ctx context.Context) (idkeeper.Counts, error)
	Keys(ctx context.Context) ([]idkeeper.KeyInfo, error)
	SkewObservations(ctx context.Context) ([]idkeeper.SkewObservation, error)
}

// Sender delivers one message to many webhooks; *discord.Client satisfies it.
type Sender interface {
	Fanout(ctx context.Context, targets []discord.Target, m discord.Message) []discord.Result
}

// Config configures an Alerter. Store, Sender and Owner are required.
type Config struct {
	Store  Store
	Sender Sender
	// Audit, when set, gets one entry per delivery (audit.AlertSent or
	// audit.AlertFailed). *account.Service satisfies it.
	Audit idkeeper.Auditor
	// Owner names this replica in job locks and messages (Registry.Config().Owner).
	Owner  string
	Clock  idkeeper.Clock // nil: time.Now
	Logger *slog.Logger   // nil: slog.Default()
	// Registerer, when set, gets the alert metrics.
	Registerer prometheus.Registerer
	// CapacityThreshold is the share of the pool below which free node IDs alert:
	// DefaultCapacityThreshold (10 %) when 0; at most 1.
	CapacityThreshold float64
	// Repeat is how often a standing capacity alert is sent again: DefaultRepeat
	// (1 h) when 0. The clock-skew alert runs on the hour, every hour.
	Repeat time.Duration
	// Interval is how often Run checks capacity: DefaultInterval (1 min) when 0.
	Interval time.Duration
	// SendTimeout bounds the deliveries of one message: DefaultSendTimeout (2 min)
	// when 0; at most 4 min, within the job lock.
	SendTimeout time.Duration
	// EventQuiet is how long the same event is not sent again: DefaultEventQuiet
	// (10 min) when 0.
	EventQuiet time.Duration
	// Title prefixes every message title ("IdKeeper" when ""), to tell
	// deployments apart in one channel.
	Title string
}

// Alerter runs the alerts. Its methods are safe for concurrent use.
type Alerter struct {
	cfg     Config
	log     *slog.Logger
	metrics *metrics

	src    sourceBox
	events chan Event
	stop   chan struct{}
	done   chan struct{}
	once   sync.Once

	mu          sync.Mutex
	lastTargets []discord.Target // the last non-empty list read, for a store that lost its accounts
}

// New checks cfg and returns an Alerter whose event worker runs until Close.
// Errors: a missing Store, Sender or Owner, or a setting out of range (an
// *idkeeper.RangeError).
func New(cfg Config) (*Alerter, error) {
	switch {
	case cfg.Store == nil || cfg.Sender == nil:
		return nil, errors.New("alert: Store and Sender are required")
	case cfg.Owner == "":
		return nil, errors.New("alert: Owner is required")
	case cfg.CapacityThreshold < 0 || cfg.CapacityThreshold > 1:
		return nil, fmt.Errorf("alert: %w", &idkeeper.RangeError{Setting: "CapacityThreshold",
			Value: fmt.Sprint(cfg.CapacityThreshold), Min: "0", Max: "1"})
	case cfg.Repeat < 0 || cfg.Interval < 0 || cfg.EventQuiet < 0:
		return nil, errors.New("alert: Repeat, Interval and EventQuiet must not be negative")
	case cfg.SendTimeout < 0 || cfg.SendTimeout > jobLockFor-time.Minute:
		return nil, fmt.Errorf("alert: %w", &idkeeper.RangeError{Setting: "SendTimeout",
			Value: cfg.SendTimeout.String(), Min: "0s", Max: (jobLockFor - time.Minute).String()})
	}
	if cfg.CapacityThreshold == 0 {
		cfg.CapacityThreshold = DefaultCapacityThreshold
	}
	cfg.Repeat = orDefault(cfg.Repeat, DefaultRepeat)
	cfg.Interval = orDefault(cfg.Interval, DefaultInterval)
	cfg.SendTimeout = orDefault(cfg.SendTimeout, DefaultSendTimeout)
	cfg.EventQuiet = orDefault(cfg.EventQuiet, DefaultEventQuiet)
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.Title == "" {
		cfg.Title = "IdKeeper"
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	a := &Alerter{cfg: cfg, log: log, metrics: m, events: make(chan Event, eventQueue),
		stop: make(chan struct{}), done: make(chan struct{})}
	go a.eventLoop()
	return a, nil
}

func orDefault(v, def time.Duration) time.Duration {
	if v == 0 {
		return def
	}
	return v
}

// Config returns the configuration in force, defaults filled in.
func (a *Alerter) Config() Config { return a.cfg }

// Close stops the event worker, after it has sent the events queued (bounded by
// SendTimeout). It does not stop Run: cancel its context.
func (a *Alerter) Close() error {
	a.once.Do(func() { close(a.stop) })
	<-a.done
	return nil
}

// Run checks the state-based alerts every Interval until ctx ends, reading
// src; it also makes src available to the event messages. The first check is
// one Interval after the call.
func (a *Alerter) Run(ctx context.Context, src Source) {
	a.src.set(src)
	t := time.NewTicker(a.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if _, err := a.Check(ctx, src); err != nil && ctx.Err() == nil {
				a.log.Warn("alert check failed; next check in one interval", "err", err, "interval", a.cfg.Interval)
			}
		}
	}
}

// Check runs the state-based alerts once, under the job lock Job: capacity at
// every call, clock skew at the first call of each hour (UTC). ran is false when
// another replica holds the lock. A message's delivery failures are not errors
// (they are counted, logged and audited); err is a store or source failure.
func (a *Alerter) Check(ctx context.Context, src Source) (ran bool, err error) {
	a.src.set(src)
	lock, ok, err := a.cfg.Store.TryLock(ctx, Job, a.cfg.Owner, jobLockFor)
	if err != nil {
		return false, fmt.Errorf("alert: take job lock: %w", err)
	}
	if !ok {
		a.log.Debug("alert check skipped: another replica holds the job lock", "owner", lock.Owner)
		return false, nil
	}
	defer func() {
		if _, uerr := a.cfg.Store.Unlock(context.WithoutCancel(ctx), Job, a.cfg.Owner, a.cfg.Interval*9/10); uerr != nil {
			a.log.Warn("release the alert job lock", "err", uerr)
		}
	}()
	return true, errors.Join(a.checkCapacity(ctx, src), a.checkSkew(ctx, src))
}

// sourceBox holds the Source events read from; it is set by Run or Check.
type sourceBox struct {
	mu  sync.Mutex
	src Source
}

func (b *sourceBox) set(s Source) {
	b.mu.Lock()
	b.src = s
	b.mu.Unlock()
}

func (b *sourceBox) get() Source {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.src
}
