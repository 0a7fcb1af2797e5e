package idkeeper

import (
	"context"
	"time"

	"github.com/idkeeper/idkeeper/internal/plural"
)

// jobLockTimes returns the job lock's lock-at-most-for and lock-at-least-for for a job
// run every interval: at most max(interval, 1 min), so a crashed holder's lock lapses
// before long; at least 9/10 of the interval, so replicas ticking out of phase do not
// each run the job once per interval.
func jobLockTimes(interval time.Duration) (atMostFor, atLeastFor time.Duration) {
	return max(interval, time.Minute), interval * 9 / 10
}

// Cleanup runs the cleanup job once under the job lock: it reclaims leases more than
// grace (+ Config.ClockDelta) past their expiry. ran is false when another replica
// holds the lock; CLOCK_UNVERIFIED when the clock check failed. The
// reclaim is conditional per lease, so even a double run is harmless. Every call,
// run or not, then updates the machine watch (watchMachines), which warns only
// after a run.
func (r *Registry) Cleanup(ctx context.Context) (reclaimed int, ran bool, err error) {
	started, lock := r.cfg.Clock(), Lock{}
	defer func() {
		r.noteJob(CleanupJob, started, ran, err, "reclaimed "+plural.N(reclaimed, "lease", "leases"), heldBy(lock))
	}()
	if err = r.clockVerified(); err != nil {
		return 0, false, err
	}
	atMost, atLeast := jobLockTimes(r.cfg.CleanupInterval)
	lock, ok, err := r.store.TryLock(ctx, CleanupJob, r.cfg.Owner, atMost)
	if err != nil {
		return 0, false, r.storeErr(err)
	}
	if !ok {
		r.watchMachines(ctx, false)
		return 0, false, nil
	}
	seen := r.reclaimable(ctx)
	err = r.mutate(ctx, "reclaim", true, func(ctx context.Context, gd Guard) error {
		// Δ once, here: a lease is reclaimed only when every verified replica's
		// clock, and so its holder's reading of the server's, is past expiry + grace.
		reclaimed, err = r.store.Reclaim(ctx, gd, r.cfg.Grace+r.cfg.ClockDelta)
		return err
	})
	if now, nerr := r.store.Now(ctx); nerr == nil && now.After(lock.Until) {
		r.obs.JobLockOverrun(CleanupJob, now.Sub(lock.Until))
		r.log.Warn("cleanup ran past its job lock", "job", CleanupJob, "overrun", now.Sub(lock.Until))
	}
	if _, uerr := r.store.Unlock(ctx, CleanupJob, r.cfg.Owner, atLeast); uerr != nil {
		r.log.Warn("release job lock", "job", CleanupJob, "err", uerr)
	}
	if err != nil {
		return 0, true, err
	}
	r.obs.Reclaimed(reclaimed)
	r.auditReclaim(ctx, reclaimed, seen)
	if reclaimed > 0 {
		r.log.Info("cleanup reclaimed expired leases", "reclaimed", reclaimed, "grace", r.cfg.Grace)
	}
	r.watchMachines(ctx, true)
	return reclaimed, true, nil
}
