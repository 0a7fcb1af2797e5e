package idkeeper

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// MaxCount is the largest number of node IDs one Alloc may ask for.
const MaxCount = 4096

// CleanupJob is the name of the cleanup job's lock.
const CleanupJob = "cleanup"

// AllocRequest asks for Count node IDs for a Requester.
type AllocRequest struct {
	Requester Requester
	Count     int        // 1..MaxCount
	ClientNow *time.Time // the client's clock at send time; nil skips the skew check
	RemoteIP  string     // for logs only
}

// RenewRequest extends the leases of a Requester.
type RenewRequest struct {
	Requester     Requester
	ClientNow     *time.Time
	FencingTokens []uint64 // the tokens the client holds, to detect a store that lost writes
	RemoteIP      string
}

// RemoveRequest releases the leases of a Requester.
type RemoveRequest struct {
	Requester Requester
	// MintedUpTo is the highest timestamp the client minted, after draining; zero
	// when unknown. See LeaseStore.Remove.
	MintedUpTo time.Time
}

// Registry is the lease policy over a Store: validation, clock-skew checks, store-reset
// recovery (DESIGN §7) and the cleanup job. Its methods are safe for concurrent use.
type Registry struct {
	store Store
	cfg   Config
	log   *slog.Logger
	obs   Observer

	sentinelMu sync.Mutex // serialises recovery
	sentinel   string
	maxFence   atomic.Uint64 // highest token handed out or seen by this process
	replID     atomic.Pointer[string]

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// NewRegistry returns a Registry over store. It validates cfg (a *RangeError names a
// setting outside its range) and does no I/O.
func NewRegistry(store Store, cfg Config) (*Registry, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if cfg.Owner == "" {
		cfg.Owner = defaultOwner()
	}
	return &Registry{store: store, cfg: cfg, log: cfg.Logger, obs: cfg.Observer}, nil
}

func defaultOwner() string {
	host, _ := os.Hostname()
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s:%d:%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}

// Config returns the registry's settings with defaults filled in.
func (r *Registry) Config() Config { return r.cfg }

// Layout is the bit layout clients must mint with.
func (r *Registry) Layout() Layout { return r.cfg.Layout }

// Store returns the underlying store.
func (r *Registry) Store() Store { return r.store }

// Open initialises the store's node pool and starts the cleanup job. A fresh store
// is logged; a pool smaller than the stored one is an error.
func (r *Registry) Open(ctx context.Context) error {
	res, err := r.store.Init(ctx, r.cfg.Nodes)
	if err != nil {
		return fmt.Errorf("initialise store: %w", err)
	}
	r.sentinelMu.Lock()
	r.sentinel = res.Sentinel
	r.sentinelMu.Unlock()
	if rs, ok := r.store.(replicationIDer); ok {
		id, err := rs.ReplicationID(ctx)
		if err != nil {
			return fmt.Errorf("read the store's replication ID: %w", err)
		}
		r.replID.Store(&id)
	}
	if res.Fresh {
		r.log.Warn("initialised an empty store as a new registry; if this store held leases before "+
			"(a Redis restart without persistence), running clients may still mint with them",
			"nodes", r.cfg.Nodes)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	r.wg.Add(1)
	go r.cleanupLoop(ctx)
	return nil
}

// Close stops the cleanup job and waits for it. It does not close the store.
func (r *Registry) Close() error {
	if r.cancel != nil {
		r.cancel()
		r.wg.Wait()
	}
	return nil
}

// Alloc grants node IDs (LeaseStore.Alloc) after checking the request and the
// client's clock. Errors: INVALID_REQUEST, CLOCK_SKEW_TOO_LARGE (skew > grace, when
// grace > 0), REQUESTER_COUNT_MISMATCH, NODE_IDS_EXHAUSTED, STORE_UNAVAILABLE.
func (r *Registry) Alloc(ctx context.Context, req AllocRequest) (g Grant, err error) {
	start := time.Now()
	defer func() { r.obs.Operation("alloc", ErrorCode(err), time.Since(start)) }()
	if err := req.Requester.Validate(); err != nil {
		return Grant{}, err
	}
	if req.Count < 1 || req.Count > MaxCount {
		return Grant{}, Invalidf("count", "count must be between 1 and %d", MaxCount)
	}
	if req.Count > r.cfg.Nodes {
		return Grant{}, Invalidf("count", "count %d is larger than the pool of %d node IDs", req.Count, r.cfg.Nodes)
	}
	if req.ClientNow != nil {
		now, err := r.store.Now(ctx)
		if err != nil {
			return Grant{}, Unavailable(err)
		}
		if err := r.checkSkew(ctx, "alloc", req.Requester, now, *req.ClientNow, req.RemoteIP); err != nil {
			return Grant{}, err
		}
	}
	floor := r.maxFence.Load()
	err = r.mutate(ctx, func() error {
		g, err = r.store.Alloc(ctx, req.Requester, req.Count, r.cfg.FirstLease)
		return err
	})
	if err != nil {
		return Grant{}, r.storeErr(err)
	}
	if err := r.checkFence(ctx, g, nil, floor); err != nil {
		return Grant{}, err
	}
	r.log.Info("alloc", "requester", req.Requester.Key(), "count", req.Count, "nodes", nodeIDs(g.Leases), "remoteIp", req.RemoteIP)
	return g, nil
}

// Renew extends every lease of the requester to the full lease duration. It is never
// rejected for clock skew. An empty Grant.Leases means the requester holds nothing.
func (r *Registry) Renew(ctx context.Context, req RenewRequest) (g Grant, err error) {
	start := time.Now()
	defer func() { r.obs.Operation("renew", ErrorCode(err), time.Since(start)) }()
	if err := req.Requester.Validate(); err != nil {
		return Grant{}, err
	}
	floor := r.maxFence.Load()
	err = r.mutate(ctx, func() error {
		g, err = r.store.Renew(ctx, req.Requester, r.cfg.LeaseDuration)
		return err
	})
	if err != nil {
		return Grant{}, r.storeErr(err)
	}
	if req.ClientNow != nil {
		// Renew is never refused for skew: a renewing client is safe, refusing it would
		// turn a cluster-wide NTP fault into an outage.
		_ = r.checkSkew(ctx, "renew", req.Requester, g.Now, *req.ClientNow, req.RemoteIP)
	}
	if err := r.checkFence(ctx, g, req.FencingTokens, floor); err != nil {
		return Grant{}, err
	}
	return g, nil
}

// Remove releases every lease of the requester at once and returns how many.
func (r *Registry) Remove(ctx context.Context, req RemoveRequest) (n int, err error) {
	start := time.Now()
	defer func() { r.obs.Operation("remove", ErrorCode(err), time.Since(start)) }()
	if err := req.Requester.Validate(); err != nil {
		return 0, err
	}
	err = r.mutate(ctx, func() error {
		n, err = r.store.Remove(ctx, req.Requester, req.MintedUpTo)
		return err
	})
	if err != nil {
		return 0, r.storeErr(err)
	}
	if n > 0 {
		r.log.Info("remove", "requester", req.Requester.Key(), "released", n)
	}
	return n, nil
}

// Remaining returns the state of the pool.
func (r *Registry) Remaining(ctx context.Context) (Counts, error) {
	c, err := r.store.Counts(ctx)
	if err != nil {
		return Counts{}, r.storeErr(err)
	}
	return c, nil
}

// Ready reports whether the store answers.
func (r *Registry) Ready(ctx context.Context) error {
	if err := r.store.Ping(ctx); err != nil {
		return Unavailable(err)
	}
	return nil
}

// mutate runs op; when the store reports a reset it recovers and runs op once more.
func (r *Registry) mutate(ctx context.Context, op func() error) error {
	err := op()
	if !errors.Is(err, ErrStoreReset) {
		return err
	}
	if err := r.recoverReset(ctx, "sentinel record missing or changed"); err != nil {
		return err
	}
	return op()
}

// checkFence detects a store whose fencing counter went back (DESIGN §7): it is
// below floor (the highest token this process had handed out or seen before the
// operation started), below a token of g, or below one a client holds. Tokens that
// concurrent operations handed out meanwhile are not compared: the counter this
// operation read may predate them, and that is no reset.
func (r *Registry) checkFence(ctx context.Context, g Grant, held []uint64, floor uint64) error {
	top := floor
	for _, l := range g.Leases {
		top = max(top, l.FencingToken)
	}
	seen := top
	for _, t := range held {
		seen = max(seen, t)
	}
	if g.Fence >= seen {
		for {
			cur := r.maxFence.Load()
			if top <= cur || r.maxFence.CompareAndSwap(cur, top) {
				return nil
			}
		}
	}
	for {
		cur := r.maxFence.Load()
		if seen <= cur || r.maxFence.CompareAndSwap(cur, seen) {
			break
		}
	}
	return r.recoverReset(ctx, fmt.Sprintf("fencing counter %d is below token %d already handed out", g.Fence, seen))
}

// recoverReset makes a reset store safe (DESIGN §7): every node ID quarantined and
// every watermark raised to now + lease duration + grace, the fencing counter raised
// past every token seen.
func (r *Registry) recoverReset(ctx context.Context, why string) error {
	r.sentinelMu.Lock()
	defer r.sentinelMu.Unlock()
	now, err := r.store.Now(ctx)
	if err != nil {
		return Unavailable(err)
	}
	until := resetUntil(now, r.cfg.LeaseDuration+r.cfg.Grace)
	s, recovered, err := r.store.Reset(ctx, r.sentinel, ResetParams{Nodes: r.cfg.Nodes, Until: until, MinFence: r.maxFence.Load()})
	if err != nil {
		return Unavailable(fmt.Errorf("recover from store reset: %w", err))
	}
	r.sentinel = s
	r.obs.StoreReset(recovered)
	if recovered {
		r.log.Error("store reset detected: every node ID is quarantined until "+until.Format(time.RFC3339),
			"reason", why, "until", until)
	} else {
		r.log.Warn("store reset detected and already recovered by another replica", "reason", why)
	}
	if r.cfg.OnReset != nil {
		if err := r.cfg.OnReset(ctx); err != nil {
			r.log.Error("after store reset", "err", err)
		}
	}
	return nil
}

// CheckStore probes the store for a reset while no request comes (a mutating no-op
// checks the sentinel) and recovers when it finds one.
// A store that tells its replication ID (Redis) is also checked for a change of it,
// which can be a failover to a replica that missed writes or a restart that lost
// some, but also a restart that lost nothing. The change is a reset unless the
// store vouches that no acknowledged write can have been lost (ReplicationChangeSafe:
// a promoted replica that acknowledged every grant and renewal, or a restart with
// every write fsynced before its reply); then it is logged and the new ID adopted.
// The new ID is adopted only once the change is handled, so a failed check is
// repeated.
func (r *Registry) CheckStore(ctx context.Context) error {
	if rs, ok := r.store.(replicationIDer); ok {
		id, err := rs.ReplicationID(ctx)
		if err != nil {
			return Unavailable(err)
		}
		prev := r.replID.Load()
		if prev != nil && *prev != id {
			safe, why, err := rs.ReplicationChangeSafe(ctx, *prev)
			if err != nil {
				return Unavailable(err)
			}
			if safe {
				r.log.Warn("replication ID changed; no acknowledged write can have been lost",
					"from", *prev, "to", id, "why", why)
			} else if err := r.recoverReset(ctx, "replication ID changed from "+*prev+" to "+id+": "+why); err != nil {
				return err
			}
		}
		r.replID.CompareAndSwap(prev, &id)
	}
	err := r.mutate(ctx, func() error { return r.store.Quarantine(ctx, time.Time{}) })
	return r.storeErr(err)
}

// replicationIDer is a store that can tell the replication ID of its data set, and
// whether a change of it from prev can have lost acknowledged writes.
type replicationIDer interface {
	ReplicationID(ctx context.Context) (string, error)
	ReplicationChangeSafe(ctx context.Context, prev string) (safe bool, why string, err error)
}

// RecoverReset treats the store as reset, for replication-ID changes and other
// signals found outside the store's own methods.
func (r *Registry) RecoverReset(ctx context.Context, why string) error {
	return r.recoverReset(ctx, why)
}

func (r *Registry) storeErr(err error) error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return err
	}
	return Unavailable(err)
}

func nodeIDs(ls []Lease) []NodeID {
	ids := make([]NodeID, len(ls))
	for i, l := range ls {
		ids[i] = l.NodeID
	}
	return slices.Clip(ids)
}
