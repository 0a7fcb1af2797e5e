package idkeeper

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/idkeeper/idkeeper/audit"
	"github.com/idkeeper/idkeeper/internal/shortlease"
)

// Defaults and ranges of the lease settings (DESIGN §3).
const (
	DefaultFirstLease      = 10 * time.Minute
	DefaultLeaseDuration   = 48 * time.Hour
	DefaultGrace           = 10 * time.Minute
	DefaultCleanupInterval = 10 * time.Minute

	MinFirstLease    = time.Minute
	MaxFirstLease    = 20 * time.Minute
	MaxGrace         = time.Hour
	MaxLeaseDuration = 365 * 24 * time.Hour
	MaxCleanupPeriod = time.Hour
)

// NoGrace, as Config.Grace, sets a grace period of zero: expired leases are
// reclaimed at the next cleanup run and clock skew is only logged, never rejected.
// (A zero Grace means the default.)
const NoGrace time.Duration = -1

// KeyQuotaQuarter, as Config.KeyMaxNodesDefault, makes the default quota a
// quarter of the pool the registry serves (DefaultKeyMaxNodes): the command
// line's default.
const KeyQuotaQuarter = -1

// DefaultKeyMaxNodes is the default quota of keys without their own in a pool of
// nodes node IDs: a quarter of the pool, rounded up, at least 1.
func DefaultKeyMaxNodes(nodes int) int { return max(1, (nodes+3)/4) }

// Config is the Registry's lease policy. Zero fields mean the default.
type Config struct {
	// Layout is the bit layout clients mint with; the store keeps it with its pool
	// and a registry whose Layout differs from the stored one does not serve
	// (POOL_MISMATCH). Default: DefaultLayout.
	Layout Layout
	// First is the pool's lowest node ID: the pool is node IDs First..First+Nodes−1.
	// Default 0; First + Nodes − 1 is at most the layout's MaxNode. A store whose
	// pool has another First does not serve (POOL_MISMATCH).
	First NodeID
	// Nodes is the pool size. Default and maximum: 2^NodeBits − First. A larger
	// Nodes than the store's grows the store's pool, unless FixedPool.
	Nodes int
	// FixedPool keeps the store's pool at the size it was initialised (or last
	// grown) with: a store with fewer node IDs than Nodes is served as it is. The
	// command line sets it unless --nodes or --node-range is given: a server
	// started without them must not grow a region's range into another's
	// (issue #22).
	FixedPool bool
	// FirstLease is the length of a new lease before its first Renew: 10 min, 1–20 min.
	FirstLease time.Duration
	// LeaseDuration is the length Renew extends a lease to: 48 h, from FirstLease
	// to 365 days.
	LeaseDuration time.Duration
	// Grace is how long past its expiry an unreclaimed lease keeps its node ID:
	// 10 min, 0–1 h (NoGrace for 0).
	Grace time.Duration
	// CleanupInterval is the period of the cleanup job: 10 min, 1 s–1 h.
	CleanupInterval time.Duration
	// KeyMaxNodesDefault is the quota of every API key without its own
	// (APIKey.MaxNodes 0), admin keys and the bootstrap key included: the most node
	// IDs the key's leases, and the node IDs cooling after its Removes, may hold at
	// once (AllocParams.MaxNodes). A key's own quota overrides it. 0: no default
	// quota (the library's default; the command line's is KeyQuotaQuarter);
	// KeyQuotaQuarter: a quarter of the pool served, DefaultKeyMaxNodes of its size
	// (the store's size with FixedPool, once read, else Nodes); else at most the
	// layout's node IDs above First.
	KeyMaxNodesDefault int
	// shortLeases lifts the lower bounds of FirstLease and LeaseDuration to 1 s, for
	// fault-injection tests that must complete in minutes; only this module's
	// programs can set it (internal/shortlease). Never in production.
	shortLeases bool
	// Owner names this replica in job locks. Default: host name, PID and a random suffix.
	Owner string
	// Clock is the registry's own wall clock (time.Now), for API-key expiry and to
	// check the store's clock against (DESIGN §7): when they differ by more than
	// StoreClockTolerance the registry stops granting, renewing and reclaiming
	// until they agree again. Lease arithmetic never uses it: that is the store's.
	Clock Clock
	// StoreClockTolerance is how far the store's clock may be from Clock:
	// max(Grace / 2, 1 s) by default.
	StoreClockTolerance time.Duration
	// State keeps what this replica must remember across restarts (the store
	// generation it adopted, the highest token known, the replication ID). Default:
	// a MemoryState, which forgets it with the process; the server passes a file.
	State StateKeeper
	// ReceiptSecret, at least MinReceiptSecretLen bytes and the same on every
	// replica, signs the leases' receipts (DESIGN §7). Without one the registry
	// hands out no receipts and takes no token as evidence, and holders cannot keep
	// their leases over a store reset.
	ReceiptSecret []byte
	Logger        *slog.Logger // slog.Default()
	Observer      Observer     // no-op
	// OnAdopt runs each time the registry adopts a store generation — at start,
	// once an uninitialised store has been initialised, after recovering from a
	// reset (DESIGN §7) — before it serves requests under it: the place to store the
	// bootstrap API key, which a store that lost its data has lost too. Errors are
	// logged; serving starts anyway.
	OnAdopt func(ctx context.Context) error
	// Audit, when set, receives an audit entry (auditlog.go) for every lease grant,
	// removal, reclaim, revocation, restore after a reset and clock-skew rejection.
	// The entries are appended in order by a goroutine of their own (Open starts
	// it, Close drains it), never on the request's path: when auditQueueSize
	// entries wait already, a new one is dropped and counted
	// (Observer.AuditDropped). *account.Service satisfies it.
	Audit Auditor
	// AdminStore, when set, is pruned by the retention job (PruneAdminRecords):
	// audit entries older than AuditRetention go, once an hour, under a job lock.
	AdminStore audit.Store
	// Sessions, when set, has its ended admin sessions pruned by the same job.
	Sessions SessionPruner
	// AuditRetention is how long audit entries are kept: DefaultAuditRetention
	// (90 days), at least MinAuditRetention.
	AuditRetention time.Duration
	// HistoryRetention is how long the lease history keeps a record after its
	// lease ended: DefaultHistoryRetention (30 days), at least
	// MinHistoryRetention. The retention job prunes the older ones hourly.
	HistoryRetention time.Duration
	// ClockVerifier, when set, vouches for this replica's clock and the store's
	// (DESIGN §8: the server's TCKCLK 2 clock agent, package clockcheck). Once its
	// Err is not nil the registry grants, renews and reclaims nothing and is not
	// ready (CLOCK_UNVERIFIED); ClockFailed releases its job locks. Nil: no
	// verification (one replica on its own store).
	ClockVerifier ClockVerifier
	// Tracer, when set, traces the registry's store calls (package tracing wires
	// OpenTelemetry to it); nil: none.
	Tracer Tracer
	// ClockDelta is Δ, the most the clocks of two verified replicas may differ:
	// cleanup reclaims a lease only Grace + ClockDelta past its expiry, adding Δ
	// once there and nowhere else. MinClockDelta..MaxClockDelta with a
	// ClockVerifier, else 0.
	ClockDelta time.Duration
}

func init() {
	shortlease.Install(func(cfg any) bool {
		c, ok := cfg.(*Config)
		if ok {
			c.shortLeases = true
		}
		return ok
	})
}

// RangeError reports a setting outside its range. Its message names the setting and
// the range, for the command line to print as is.
type RangeError struct {
	Setting  string
	Value    string
	Min, Max string
}

func (e *RangeError) Error() string {
	return fmt.Sprintf("%s = %s is outside its range %s..%s", e.Setting, e.Value, e.Min, e.Max)
}

// Validate reports a setting outside its range as a *RangeError, without I/O.
func (c Config) Validate() error {
	_, err := c.withDefaults()
	return err
}

// Pool is the pool c asks for: First, Nodes and Layout (after defaults: see
// Registry.Config).
func (c Config) Pool() PoolSpec { return PoolSpec{First: c.First, Nodes: c.Nodes, Layout: c.Layout} }

// withDefaults returns c with defaults filled in, or a *RangeError.
func (c Config) withDefaults() (Config, error) {
	if c.Layout == (Layout{}) {
		c.Layout = DefaultLayout
	}
	if err := c.Layout.Validate(); err != nil {
		return c, err
	}
	if c.First < 0 || int64(c.First) > c.Layout.MaxNode() {
		return c, &RangeError{"first", fmt.Sprint(c.First), "0", fmt.Sprint(c.Layout.MaxNode())}
	}
	if c.Nodes == 0 {
		c.Nodes = c.Layout.Nodes() - int(c.First)
	}
	if most := c.Layout.Nodes() - int(c.First); c.Nodes < 1 || c.Nodes > most {
		return c, &RangeError{"nodes", fmt.Sprint(c.Nodes), "1", fmt.Sprint(most)}
	}
	if q, most := c.KeyMaxNodesDefault, c.Layout.Nodes()-int(c.First); q != KeyQuotaQuarter && (q < 0 || q > most) {
		return c, &RangeError{"key-max-nodes-default", fmt.Sprint(q), "0", fmt.Sprint(most)}
	}
	if c.FirstLease == 0 {
		c.FirstLease = DefaultFirstLease
	}
	if c.LeaseDuration == 0 {
		c.LeaseDuration = DefaultLeaseDuration
	}
	switch c.Grace {
	case 0:
		c.Grace = DefaultGrace
	case NoGrace:
		c.Grace = 0
	}
	if c.CleanupInterval == 0 {
		c.CleanupInterval = DefaultCleanupInterval
	}
	minFirst, minInterval := MinFirstLease, time.Second
	if c.shortLeases {
		minFirst = time.Second
	}
	checks := []struct {
		name          string
		v, min, max   time.Duration
		minStr, maxTo string
	}{
		{"first-lease", c.FirstLease, minFirst, MaxFirstLease, "", ""},
		{"lease-duration", c.LeaseDuration, c.FirstLease, MaxLeaseDuration, "first-lease (" + c.FirstLease.String() + ")", ""},
		{"cleanup-grace", c.Grace, 0, MaxGrace, "", ""},
		{"cleanup-interval", c.CleanupInterval, minInterval, MaxCleanupPeriod, "", ""},
	}
	for _, k := range checks {
		if k.v < k.min || k.v > k.max {
			lo := k.minStr
			if lo == "" {
				lo = k.min.String()
			}
			return c, &RangeError{k.name, k.v.String(), lo, k.max.String()}
		}
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Clock == nil {
		c.Clock = time.Now
	}
	if c.Observer == nil {
		c.Observer = nopObserver{}
	}
	if c.StoreClockTolerance == 0 {
		c.StoreClockTolerance = max(c.Grace/2, time.Second)
	}
	if c.StoreClockTolerance < 0 {
		return c, &RangeError{"store-clock-tolerance", c.StoreClockTolerance.String(), "0s", "∞"}
	}
	if c.State == nil {
		c.State = &MemoryState{}
	}
	if c.AuditRetention == 0 {
		c.AuditRetention = DefaultAuditRetention
	}
	if c.AuditRetention < MinAuditRetention {
		return c, &RangeError{"audit-retention", c.AuditRetention.String(), MinAuditRetention.String(), "∞"}
	}
	if c.HistoryRetention == 0 {
		c.HistoryRetention = DefaultHistoryRetention
	}
	if c.HistoryRetention < MinHistoryRetention {
		return c, &RangeError{"history-retention", c.HistoryRetention.String(), MinHistoryRetention.String(), "∞"}
	}
	if c.ClockVerifier != nil && (c.ClockDelta < MinClockDelta || c.ClockDelta > MaxClockDelta) ||
		c.ClockVerifier == nil && c.ClockDelta != 0 {
		lo, hi := MinClockDelta.String(), MaxClockDelta.String()
		if c.ClockVerifier == nil {
			lo, hi = "0s (no clock verifier)", "0s"
		}
		return c, &RangeError{"clock-delta", c.ClockDelta.String(), lo, hi}
	}
	if n := len(c.ReceiptSecret); n > 0 && n < MinReceiptSecretLen {
		return c, &RangeError{"receipt-secret", fmt.Sprintf("%d bytes", n), fmt.Sprintf("%d bytes", MinReceiptSecretLen), "∞"}
	}
	return c, nil
}

// Observer receives the registry's events, for metrics. Methods must be cheap and
// must not block.
type Observer interface {
	// Operation reports one Alloc, Renew or Remove: op is "alloc", "renew" or
	// "remove", code is "" on success.
	Operation(op string, code Code, elapsed time.Duration)
	// Skew reports one clock-skew observation.
	Skew(op string, skew time.Duration, level SkewLevel)
	// Reclaimed reports one cleanup run that reclaimed n leases.
	Reclaimed(n int)
	// JobLockOverrun reports a job that ran past its lock-at-most-for by overrun.
	JobLockOverrun(job string, overrun time.Duration)
	// StoreReset reports a recovery from a store reset; newGeneration is false when
	// the store held another replica's (or a newly initialised) generation.
	StoreReset(newGeneration bool)
	// Phase reports the registry's phase whenever it changes, and whether the
	// store's clock agrees with its own (offset: store − own, last measured).
	Phase(p Phase, clockOK bool, offset time.Duration)
	// Evidence reports what a Renew's evidence came to: restored and contested node
	// IDs, and ignored evidence by reason ("bad_receipt", "bare_token").
	Evidence(kind string, n int)
	// CoolingGrants reports n node IDs an Alloc newly granted whose window opens
	// after the grant (NotBefore after its now): their holder must wait to mint.
	CoolingGrants(n int)
	// Machines reports, at every cleanup tick, the machine IDs whose sessions hold
	// the most node IDs (at most machineWatchTop, sorted as summariseMachines
	// sorts) and how many machine IDs hold leases at all. It replaces the previous
	// report.
	Machines(top []MachineLeases, machines int)
	// AuditDropped reports n audit entries that never reached the audit log: the
	// queue was full, or the append failed (Config.Audit).
	AuditDropped(n int)
}

type nopObserver struct{}

func (nopObserver) Operation(string, Code, time.Duration) {}
func (nopObserver) Skew(string, time.Duration, SkewLevel) {}
func (nopObserver) Reclaimed(int)                         {}
func (nopObserver) JobLockOverrun(string, time.Duration)  {}
func (nopObserver) StoreReset(bool)                       {}
func (nopObserver) Phase(Phase, bool, time.Duration)      {}
func (nopObserver) Evidence(string, int)                  {}
func (nopObserver) CoolingGrants(int)                     {}
func (nopObserver) Machines([]MachineLeases, int)         {}
func (nopObserver) AuditDropped(int)                      {}
