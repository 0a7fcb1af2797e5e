package idkeeper

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/idkeeper/idkeeper/protocol"
)

// Phase is where a registry stands with its store (DESIGN §7).
type Phase string

// Phases of a Registry.
const (
	// PhaseStarting: Open has not looked at the store yet.
	PhaseStarting Phase = "starting"
	// PhaseUninitialised: the store holds no generation and this replica never saw
	// one: it waits for `idkeeper init` (503 STORE_NOT_INITIALISED).
	PhaseUninitialised Phase = "uninitialised"
	// PhaseRecovering: a reset was detected and the recovery has not completed
	// (503 STORE_RECOVERING, Retry-After).
	PhaseRecovering Phase = "recovering"
	// PhaseReady: serving.
	PhaseReady Phase = "ready"
	// PhasePoolMismatch: the store's pool has another First or layout than
	// Config's (503 POOL_MISMATCH): an ID space never changes under running
	// clients, so the registry serves nothing until the two agree.
	PhasePoolMismatch Phase = "pool-mismatch"
)

// resetProbeInterval is how often the registry checks the store for a reset, a
// wrong clock or an initialisation while no request comes.
const resetProbeInterval = 5 * time.Second

// Phase returns the registry's phase.
func (r *Registry) Phase() Phase { return *r.phase.Load() }

func (r *Registry) setPhase(p Phase) {
	if old := r.phase.Swap(&p); old == nil || *old != p {
		r.obs.Phase(p, r.clockOK.Load(), time.Duration(r.clockSkew.Load()))
	}
}

// Open loads the replica's state, compares the store with it (DESIGN §7) and
// starts the background jobs (cleanup, the retention job, the audit appender, and
// the probe that notices resets, clock disagreements and a store initialised
// meanwhile). A store this replica never saw
// that holds no generation is not initialised here: the registry waits for
// `idkeeper init`. A reset found on the way is recovered before Open returns.
// It fails when the state cannot be read or a store that answers refuses the pool
// (a smaller size: INVALID_REQUEST; another First or layout: POOL_MISMATCH); a
// store that does not answer is retried by the probe.
func (r *Registry) Open(ctx context.Context) error {
	st, err := r.cfg.State.Load(ctx)
	if err != nil {
		return fmt.Errorf("load the replica state: %w", err)
	}
	r.state.update(func(s *ReplicaState) bool { *s = st; return false })
	if err := r.CheckStore(ctx); err != nil {
		var re *RangeError
		if e := (*Error)(nil); errors.As(err, &re) || (errors.As(err, &e) && (e.Code == protocol.CodeInvalidRequest || e.Code == protocol.CodePoolMismatch)) {
			return err
		}
		r.log.Warn("store check at start", "err", err)
	}
	r.releasePredecessorLocks(ctx, st.Owner)
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	r.audit.start()
	r.wg.Add(1)
	go r.loop(ctx)
	return nil
}

// releasePredecessorLocks records this process as the state's owner and releases
// the job locks prev, the owner of the process that ran on this state before it,
// still holds: that process is dead (the state is held by one process at a time),
// and a lock it took just before it died would stall the job on every replica
// until it lapses, a minute for cleanup. Locks held by any other owner, and the
// event locks (named NAME:KEY), are left alone. Failures are logged: such locks
// still lapse by themselves.
func (r *Registry) releasePredecessorLocks(ctx context.Context, prev string) {
	own := r.cfg.Owner
	r.state.update(func(s *ReplicaState) bool { changed := s.Owner != own; s.Owner = own; return changed })
	if err := r.syncState(ctx); err != nil {
		r.log.Warn("save the replica state", "err", err)
	}
	if prev == "" || prev == own {
		return
	}
	locks, err := r.store.Locks(ctx)
	if err != nil {
		r.log.Warn("read the job locks to release the previous process's", "err", err)
		return
	}
	for _, l := range locks {
		// A lock named NAME:KEY (alert:…, api-key-expiry:…) marks an event as
		// handled until it lapses and is never released: releasing it would
		// repeat the event.
		if l.Owner != prev || strings.Contains(l.Name, ":") {
			continue
		}
		if held, err := r.store.Unlock(ctx, l.Name, prev, 0); err != nil {
			r.log.Warn("release a job lock of the previous process", "job", l.Name, "owner", prev, "err", err)
		} else if held {
			r.log.Info("released a job lock the previous process on this state held", "job", l.Name, "owner", prev)
		}
	}
}

// Close stops the background jobs and waits for them, writes the audit entries
// still queued (at most 10 s), then saves the replica's state. It does not close
// the store.
func (r *Registry) Close() error {
	if r.cancel != nil {
		r.cancel()
		r.wg.Wait()
	}
	r.audit.close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return r.state.Sync(ctx)
}

// Serving returns nil when requests may be served, else the 503 to answer:
// STORE_NOT_INITIALISED (saying what to run), POOL_MISMATCH or STORE_RECOVERING.
func (r *Registry) Serving() error {
	switch r.Phase() {
	case PhaseReady:
		return nil
	case PhaseUninitialised:
		return ErrNotInitialised
	case PhasePoolMismatch:
		if e := r.mismatch.Load(); e != nil {
			return e
		}
	}
	return &Error{Code: protocol.CodeStoreRecovering,
		Message: "the registry is checking or recovering its store after a reset; retry shortly"}
}

// Ready returns nil when the registry serves and its store answers and agrees on
// the time, else the reason as an *Error: the codes of Serving, STORE_CLOCK_SKEW
// or STORE_UNAVAILABLE.
func (r *Registry) Ready(ctx context.Context) error {
	if err := r.Serving(); err != nil {
		return err
	}
	if !r.clockOK.Load() {
		return r.clockErr()
	}
	if err := r.clockVerified(); err != nil {
		return err
	}
	if err := r.store.Ping(ctx); err != nil {
		return Unavailable(err)
	}
	return nil
}

func (r *Registry) clockErr() error {
	return &Error{Code: protocol.CodeStoreClockSkew,
		Message: fmt.Sprintf("the store's clock is %s from this registry's, more than %s: no grants, renewals or "+
			"reclaims until they agree; check NTP on both", time.Duration(r.clockSkew.Load()), r.cfg.StoreClockTolerance),
		Details: map[string]any{"offsetMs": time.Duration(r.clockSkew.Load()).Milliseconds(),
			"toleranceMs": r.cfg.StoreClockTolerance.Milliseconds()}}
}

func (r *Registry) clockDisagrees(err error) {
	if r.clockOK.Swap(false) {
		r.log.Error("the store's clock disagrees with this registry's: not granting, renewing or reclaiming",
			"err", err, "tolerance", r.cfg.StoreClockTolerance)
		r.obs.Phase(r.Phase(), false, time.Duration(r.clockSkew.Load()))
	}
}

// checkClock compares the store's clock with the registry's and records the verdict.
func (r *Registry) checkClock(storeNow time.Time) {
	off := storeNow.Sub(protocol.Millis(r.cfg.Clock()))
	r.clockSkew.Store(int64(off))
	ok := off.Abs() <= r.cfg.StoreClockTolerance
	if r.clockOK.Swap(ok) != ok {
		if ok {
			r.log.Info("the store's clock agrees with this registry's again", "offset", off)
		} else {
			r.log.Error("the store's clock disagrees with this registry's: not granting, renewing or reclaiming",
				"offset", off, "tolerance", r.cfg.StoreClockTolerance)
		}
		r.obs.Phase(r.Phase(), ok, off)
	}
}

// CheckStore compares the store with what this replica knows (DESIGN §7) and acts:
// a store without a generation is waited for when this replica never saw one, and
// recovered when it did; another generation than the adopted one, a fencing
// counter below a token known to be handed out, or a change of the replication ID
// that the store cannot vouch for is a reset, recovered at once. It also compares
// the clocks and grows the pool to Config.Nodes (unless Config.FixedPool). A store whose pool has another
// First or layout than Config's (Config.Pool) is not served, adopted or recovered:
// the registry enters PhasePoolMismatch and CheckStore returns the POOL_MISMATCH
// Error (PoolMismatchError). The probe calls it every few seconds; Open once.
func (r *Registry) CheckStore(ctx context.Context) error {
	// What the store is compared with is taken before it is read: a grant that
	// completes between the read and the comparison raises what this replica knows,
	// and must not look like a counter that went back.
	from, known := r.Generation().ID, r.state.maxToken()
	st, err := r.store.Status(ctx)
	if err != nil {
		return Unavailable(err)
	}
	r.checkClock(st.Now)
	if want := r.cfg.Pool(); st.Pool.Nodes > 0 && !st.Pool.SameSpace(want) {
		e := PoolMismatchError(st.Pool, want)
		r.mismatch.Store(e)
		if r.Phase() != PhasePoolMismatch {
			r.log.Error("the store's pool differs from this registry's: not serving", "stored", st.Pool.String(),
				"configured", want.String())
		}
		r.setPhase(PhasePoolMismatch)
		return e
	}
	seen := r.state.seen()
	switch {
	case !st.Initialised && seen.IsZero():
		if r.Phase() != PhaseUninitialised {
			r.log.Error("the store is not initialised: this registry waits; for a new deployment run " +
				"`idkeeper init --store …` once (never for a store that held leases: a registry that saw it recovers it)")
		}
		r.setPhase(PhaseUninitialised)
		return nil
	case !st.Initialised:
		return r.recoverReset(ctx, fmt.Sprintf("the store lost its generation %d (%s): it is empty", seen.Number, seen.ID), from)
	case seen.IsZero():
		if err := r.adopt(ctx, st.Generation); err != nil {
			return err
		}
	case st.Generation.ID != seen.ID:
		return r.recoverReset(ctx, fmt.Sprintf("the store holds generation %d (%s, %s), this registry saw %d (%s)",
			st.Generation.Number, st.Generation.ID, st.Generation.Origin, seen.Number, seen.ID), from)
	case st.Fence < known:
		return r.recoverReset(ctx, fmt.Sprintf("the store's fencing counter %d is below token %d, known to be handed out",
			st.Fence, known), from)
	}
	if err := r.checkReplication(ctx, from); err != nil {
		return err
	}
	if r.Phase() != PhaseReady {
		// Adopted from the state file: the store matched it.
		if err := r.adopt(ctx, st.Generation); err != nil {
			return err
		}
	}
	if st.Pool.Nodes > r.cfg.Nodes {
		return ShrinkRefused(uint64(st.Pool.Nodes), r.cfg.Nodes)
	}
	if st.Pool.Nodes > 0 {
		r.state.update(func(s *ReplicaState) bool {
			changed := s.PoolNodes != st.Pool.Nodes
			s.PoolNodes = st.Pool.Nodes
			return changed
		})
	}
	if st.Pool.Nodes < r.cfg.Nodes && !r.cfg.FixedPool {
		if err := r.store.Grow(ctx, r.guard(false), r.cfg.Pool()); err != nil {
			if errors.Is(err, ErrStoreReset) {
				return r.recoverReset(ctx, err.Error(), from)
			}
			return r.storeErr(err)
		}
		r.log.Info("grew the node pool", "from", st.Pool.Nodes, "to", r.cfg.Nodes)
	}
	return nil
}

// resetPool is the pool a reset recreates: Config's, but with FixedPool the size
// last read from the store when known, so that a server started without an
// explicit range recreates what the store held rather than the whole layout.
func (r *Registry) resetPool() PoolSpec {
	p := r.cfg.Pool()
	if n := r.state.poolNodes(); r.cfg.FixedPool && n > 0 {
		p.Nodes = min(n, p.Nodes)
	}
	return p
}

// PoolMismatchError is the POOL_MISMATCH Error of a registry configured for the
// pool configured whose store holds the pool stored: it names both and says that
// changing a node range or layout takes a deliberate re-initialisation. Details
// "stored" and "configured" are the two specs (PoolSpec.String).
func PoolMismatchError(stored, configured PoolSpec) *Error {
	return &Error{Code: protocol.CodePoolMismatch,
		Message: fmt.Sprintf("the store's pool is %s, but this registry is configured for %s: a node range or layout "+
			"never changes under running clients, so this registry serves nothing; configure the store's range and "+
			"layout, or re-initialise the store deliberately to change them", stored, configured),
		Details: map[string]any{"stored": stored.String(), "configured": configured.String()}}
}

// adopt makes g the registry's generation, saves it, runs OnAdopt and starts
// serving.
func (r *Registry) adopt(ctx context.Context, g Generation) error {
	r.recoverMu.Lock()
	defer r.recoverMu.Unlock()
	if r.Phase() == PhaseReady && r.Generation().ID == g.ID {
		return nil
	}
	first := r.state.seen().IsZero()
	r.setGeneration(g)
	if err := r.syncState(ctx); err != nil {
		return err
	}
	if first {
		r.log.Info("adopted the store's generation", "generation", g.Number, "id", g.ID, "origin", g.Origin)
	}
	r.onAdopt(ctx)
	r.setPhase(PhaseReady)
	return nil
}

func (r *Registry) setGeneration(g Generation) {
	r.genMu.Lock()
	r.gen = g
	r.genMu.Unlock()
	r.state.update(func(s *ReplicaState) bool {
		changed := s.Generation != g
		s.Generation = g
		return changed
	})
}

// recoverReset makes a reset store safe (DESIGN §7): every node ID quarantined and
// every watermark floor raised to now + lease duration + grace, the fencing counter
// raised past every token known, a new generation (or the one another replica
// wrote) adopted. While it runs, requests are answered STORE_RECOVERING; when it
// fails, the phase stays there and the probe tries again.
//
// from is the generation ID the caller's decision rests on; when the registry has
// adopted another one since (a concurrent recovery), there is nothing left to do.
func (r *Registry) recoverReset(ctx context.Context, why, from string) error {
	r.recoverMu.Lock()
	defer r.recoverMu.Unlock()
	if r.Generation().ID != from {
		return nil
	}
	r.setPhase(PhaseRecovering)
	storeNow, err := r.store.Now(ctx)
	if err != nil {
		return Unavailable(err)
	}
	// The later of the two clocks: a store clock that stepped back must not end the
	// quarantine before the leases it granted with its earlier reading.
	now := storeNow
	if own := protocol.Millis(r.cfg.Clock()); own.After(now) {
		now = own
	}
	until := now.Add(r.cfg.LeaseDuration + r.cfg.Grace)
	seen := r.Generation()
	if seen.IsZero() {
		seen = r.state.seen()
	}
	res, err := r.store.Reset(ctx, ResetParams{Seen: seen, Pool: r.resetPool(), Until: until, MinFence: r.state.maxToken()})
	if err != nil {
		r.log.Error("store reset detected, recovery failed; retrying", "reason", why, "err", err)
		return &Error{Code: protocol.CodeStoreRecovering,
			Message: "the registry is recovering its store after a reset; retry shortly", Err: err}
	}
	r.setGeneration(res.Generation)
	// The recovery covers whatever a change of the replication ID meant: adopt the
	// current one, or the next check would take the same change for another reset.
	if rs, ok := r.store.(ReplicatedStore); ok {
		if id, err := rs.ReplicationID(ctx); err == nil {
			r.state.update(func(s *ReplicaState) bool { changed := s.ReplicationID != id; s.ReplicationID = id; return changed })
		} else {
			r.log.Warn("read the replication ID after a recovery", "err", err)
		}
	}
	if err := r.syncState(ctx); err != nil {
		return err
	}
	// Stored before it is reported: an observer's alert reads it (LastReset).
	r.lastReset.Store(&RecoveredReset{At: now, Why: why, Until: until, Generation: res.Generation})
	r.obs.StoreReset(res.NewGeneration)
	r.log.Error("store reset detected and recovered: every node ID nobody claims is quarantined until "+
		until.Format(time.RFC3339)+"; holders keep their leases when their Renew shows their receipts",
		"reason", why, "until", until, "generation", res.Generation.Number, "newGeneration", res.NewGeneration)
	r.onAdopt(ctx)
	r.setPhase(PhaseReady)
	return nil
}

func (r *Registry) onAdopt(ctx context.Context) {
	if r.cfg.OnAdopt == nil {
		return
	}
	if err := r.cfg.OnAdopt(ctx); err != nil {
		r.log.Error("after adopting the store's generation", "err", err)
	}
}

// checkReplication compares the store's replication ID (Redis) with the one last
// judged, which the replica state keeps across restarts. A change is a reset
// unless the store vouches that no acknowledged write can have been lost (a
// promoted replica that acknowledged every grant and renewal, or a restart with
// every write fsynced before its reply); then it is logged and adopted. The new ID
// is adopted only once the change is handled, so a failed check is repeated.
func (r *Registry) checkReplication(ctx context.Context, from string) error {
	rs, ok := r.store.(ReplicatedStore)
	if !ok {
		return nil
	}
	id, err := rs.ReplicationID(ctx)
	if err != nil {
		return Unavailable(err)
	}
	st, _ := r.state.get()
	if prev := st.ReplicationID; prev != "" && prev != id {
		safe, why, err := rs.ReplicationChangeSafe(ctx, prev)
		if err != nil {
			return Unavailable(err)
		}
		if safe {
			r.log.Warn("replication ID changed; no acknowledged write can have been lost", "from", prev, "to", id, "why", why)
		} else if err := r.recoverReset(ctx, "replication ID changed from "+prev+" to "+id+": "+why, from); err != nil {
			return err
		}
	}
	if st.ReplicationID != id {
		r.state.update(func(s *ReplicaState) bool { s.ReplicationID = id; return true })
		return r.syncState(ctx)
	}
	return nil
}

func (r *Registry) loop(ctx context.Context) {
	defer r.wg.Done()
	cleanup := time.NewTicker(r.cfg.CleanupInterval)
	defer cleanup.Stop()
	probe := time.NewTicker(min(resetProbeInterval, r.cfg.CleanupInterval))
	defer probe.Stop()
	keys := time.NewTimer(keyCheckFirst)
	defer keys.Stop()
	var retention <-chan time.Time // nil: no retention job
	var retentionTimer *time.Timer
	if r.cfg.AdminStore != nil || r.cfg.Sessions != nil {
		retentionTimer = time.NewTimer(retentionFirst)
		defer retentionTimer.Stop()
		retention = retentionTimer.C
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-retention:
			if _, _, _, err := r.PruneAdminRecords(ctx); err != nil && ctx.Err() == nil {
				r.log.Error("retention job", "err", err)
			}
			retentionTimer.Reset(retentionInterval)
		case <-keys.C:
			if _, err := r.WarnExpiringKeys(ctx); err != nil && ctx.Err() == nil {
				r.log.Warn("API key expiry check", "err", err)
			}
			keys.Reset(keyCheckEvery)
		case <-cleanup.C:
			if r.Phase() != PhaseReady || !r.clockOK.Load() || r.clockVerified() != nil {
				continue
			}
			if _, _, err := r.Cleanup(ctx); err != nil && ctx.Err() == nil {
				r.log.Error("cleanup job", "err", err)
			}
		case <-probe.C:
			if err := r.CheckStore(ctx); err != nil && ctx.Err() == nil {
				r.log.Warn("store check", "err", err)
			}
			// Skew readings the per-minute limit held back, of requesters that call
			// rarely (a renewal a day): written here so that a cleared skew shows.
			r.flushSkew(ctx, 64)
		}
	}
}
