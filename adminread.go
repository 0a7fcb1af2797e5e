package idkeeper

import (
	"context"
	"sync"
	"time"
)

// The registry's reads for the admin web and its API (issue #10): the leases, the
// map of the pool, the clock-skew observations and the store's health. They change
// nothing.

// NodeStatus is what the admin web's map shows of one node ID.
type NodeStatus string

// Node statuses, at the store's now (LeaseStore).
const (
	NodeFree        NodeStatus = "free"        // free, allocatable, its window open at once (ready)
	NodeCooling     NodeStatus = "cooling"     // free and allocatable; a grant's window opens later
	NodeLeased      NodeStatus = "leased"      // held by a lease that has not expired
	NodeGrace       NodeStatus = "grace"       // held by an expired lease that cleanup has not reclaimed
	NodeQuarantined NodeStatus = "quarantined" // free, not allocatable before its quarantine ends
)

// PoolMap is the state of the pool at one time: the counts and the status of every
// node ID.
type PoolMap struct {
	Counts Counts
	Now    time.Time    // the store's clock when the map was read
	First  NodeID       // the pool's first node ID (Config.First)
	Nodes  []NodeStatus // index i = node ID First+i, 0..Counts.Total−1
	until  []time.Time  // poolMap with quarantine ends: QuarantinedUntil of each quarantined node ID, by index
}

// poolMapWorkers bounds the concurrent node reads of PoolMap.
const poolMapWorkers = 8

// PoolMap reads the counts and the status of every node ID. Leases come from one
// read of the store; free node IDs are told apart (free, cooling, quarantined) by
// reading each one's state only when the counts say some are cooling or
// quarantined: the common pool costs three store reads. The parts are read one
// after the other, not in one step: a grant between them may show in one and not
// the other. Errors: the 503s of Serving, STORE_UNAVAILABLE.
func (r *Registry) PoolMap(ctx context.Context) (PoolMap, error) { return r.poolMap(ctx, false) }

// poolMap is PoolMap; with until it also keeps the end of each quarantine read
// (PoolMap.until).
func (r *Registry) poolMap(ctx context.Context, until bool) (PoolMap, error) {
	if err := r.Serving(); err != nil {
		return PoolMap{}, err
	}
	now, err := r.store.Now(ctx)
	if err != nil {
		return PoolMap{}, r.storeErr(err)
	}
	leases, err := r.store.Leases(ctx)
	if err != nil {
		return PoolMap{}, r.storeErr(err)
	}
	c, err := r.store.Counts(ctx)
	if err != nil {
		return PoolMap{}, r.storeErr(err)
	}
	m := PoolMap{Counts: c, Now: now, First: r.cfg.First, Nodes: make([]NodeStatus, c.Total)}
	for i := range m.Nodes {
		m.Nodes[i] = NodeFree
	}
	for _, l := range leases {
		i := int(l.NodeID - m.First)
		if i < 0 || i >= c.Total {
			continue
		}
		m.Nodes[i] = NodeLeased
		if l.Expired(now) {
			m.Nodes[i] = NodeGrace
		}
	}
	if c.Cooling+c.Quarantined == 0 {
		return m, nil
	}
	if until {
		m.until = make([]time.Time, c.Total)
	}
	if err := r.classifyFree(ctx, m.First, m.Nodes, m.until, now); err != nil {
		return PoolMap{}, err
	}
	return m, nil
}

// classifyFree reads the state of every node ID marked NodeFree in nodes (index i:
// node ID first+i) and marks it quarantined or cooling at now where it is; until,
// when not nil, gets the end of each quarantine.
func (r *Registry) classifyFree(ctx context.Context, first NodeID, nodes []NodeStatus, until []time.Time, now time.Time) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ids := make(chan NodeID)
	var (
		wg     sync.WaitGroup
		once   sync.Once
		failed error
	)
	for range poolMapWorkers {
		wg.Go(func() {
			for id := range ids {
				st, err := r.store.Node(ctx, first+id)
				if err != nil {
					once.Do(func() { failed = r.storeErr(err); cancel() })
					continue
				}
				switch {
				case st.QuarantinedUntil.After(now):
					nodes[id] = NodeQuarantined // each worker writes its own indexes
					if until != nil {
						until[id] = st.QuarantinedUntil
					}
				case !st.Fenced().Before(now):
					nodes[id] = NodeCooling
				}
			}
		})
	}
feed:
	for i, s := range nodes {
		if s != NodeFree {
			continue
		}
		select {
		case ids <- NodeID(i):
		case <-ctx.Done():
			break feed
		}
	}
	close(ids)
	wg.Wait()
	if failed != nil {
		return failed
	}
	return r.storeErr(ctx.Err())
}

// Leases returns every lease in the store, expired ones not yet reclaimed
// included, sorted by node ID. Errors: the 503s of Serving, STORE_UNAVAILABLE.
func (r *Registry) Leases(ctx context.Context) ([]Lease, error) {
	if err := r.Serving(); err != nil {
		return nil, err
	}
	ls, err := r.store.Leases(ctx)
	if err != nil {
		return nil, r.storeErr(err)
	}
	return ls, nil
}

// SkewObservations returns the last clock-skew observation of each requester the
// store keeps (SkewStore), as the registry judged it when it was made: what the
// admin lease list shows, never recomputed. Errors: STORE_UNAVAILABLE.
func (r *Registry) SkewObservations(ctx context.Context) ([]SkewObservation, error) {
	obs, err := r.store.SkewObservations(ctx)
	if err != nil {
		return nil, r.storeErr(err)
	}
	return obs, nil
}

// StoreHealth is what the registry knows of its store, for operators.
type StoreHealth struct {
	Phase Phase
	// Adopted is the generation this registry serves under; zero before it adopted
	// one. A generation of Origin OriginRecovered began with the last store reset
	// this deployment recovered from, at its At.
	Adopted Generation
	// Status is the store's own view, read now: its generation, fencing counter,
	// pool size and clock. Zero when the store did not answer (StatusErr).
	Status    StoreStatus
	StatusErr error
	// ClockOK is false while the store's clock and the registry's disagree by more
	// than Config.StoreClockTolerance; ClockOffset is the last measured difference
	// (store − registry).
	ClockOK     bool
	ClockOffset time.Duration
	// Recovered is the last store reset this replica recovered from itself since
	// it was made; nil when it recovered none (a reset another replica recovered
	// shows in Adopted alone).
	Recovered *RecoveredReset
	// Locks are the job locks the store holds now, every replica's (JobLocks);
	// LocksErr when they could not be read.
	Locks    []Lock
	LocksErr error
	// Runs are this replica's last run of each periodic job (JobRuns).
	Runs []JobRun
}

// RecoveredReset is a store reset a replica recovered from (DESIGN §7).
type RecoveredReset struct {
	At         time.Time  // when the recovery began: the later of the store's clock and the registry's
	Why        string     // what showed the reset
	Until      time.Time  // the quarantine's end: At + lease duration + grace
	Generation Generation // the generation adopted by the recovery
}

// LastReset returns the last store reset this replica recovered from itself
// since it was made, or nil when it recovered none. Observer.StoreReset is told
// of a recovery after it is in place.
func (r *Registry) LastReset() *RecoveredReset { return r.lastReset.Load() }

// StoreHealth reads the store's status and job locks and returns them with what
// the registry knows. A store that does not answer is no error: StatusErr and
// LocksErr tell it.
func (r *Registry) StoreHealth(ctx context.Context) StoreHealth {
	h := StoreHealth{Phase: r.Phase(), Adopted: r.Generation(), ClockOK: r.clockOK.Load(),
		ClockOffset: time.Duration(r.clockSkew.Load()), Recovered: r.lastReset.Load(), Runs: r.JobRuns()}
	st, err := r.store.Status(ctx)
	if err != nil {
		h.StatusErr = r.storeErr(err)
	} else {
		h.Status = st
	}
	h.Locks, h.LocksErr = r.JobLocks(ctx)
	return h
}
