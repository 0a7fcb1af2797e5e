//go:build chaos_unsafe

package idkeeper

import (
	"context"
	"os"
	"sync"
	"time"
)

// This build is for the fault-injection suite's negative controls only (see
// internal/chaos and docs/reliability.md); never ship it. Each switch turns one
// safety mechanism off when its environment variable is "1" at process start;
// with none set, this build behaves as the production one.
var (
	// IDKEEPER_UNSAFE_NO_RESET_QUARANTINE: a detected store reset neither
	// quarantines the node IDs nor raises their watermarks past what forgotten
	// holders may still mint (Until = now instead of now + lease + grace).
	unsafeNoResetQuarantine = os.Getenv("IDKEEPER_UNSAFE_NO_RESET_QUARANTINE") == "1"
	// IDKEEPER_UNSAFE_UNCONDITIONAL_RECLAIM: the cleanup job frees node IDs from a
	// stale read of the leases, without the atomic re-check of Reclaim.
	unsafeUnconditionalReclaim = os.Getenv("IDKEEPER_UNSAFE_UNCONDITIONAL_RECLAIM") == "1"
)

func resetUntil(now time.Time, d time.Duration) time.Time {
	if unsafeNoResetQuarantine {
		return now
	}
	return now.Add(d)
}

// unsafeFreer is a store that frees node IDs whoever holds them (the redis store
// in a chaos_unsafe build).
type unsafeFreer interface {
	UnsafeFree(ctx context.Context, g Guard, nodes ...NodeID) (int, error)
}

// staleViews holds, per Registry, the node IDs the previous cleanup run read as
// expired past grace.
var staleViews sync.Map // *Registry → []NodeID

// reclaim, with the switch on, frees by node ID the leases that the previous run's
// read showed expired past grace, without checking again whether they were renewed,
// or freed and granted anew, since: a reclaim that acts on a stale read, as a replica
// does that resumes from a long pause between its read and its writes. The stale
// window is one cleanup interval, so the race happens on every run, not once in a
// blue moon. Freeing keeps watermarks, as Reclaim does.
func (r *Registry) reclaim(ctx context.Context, gd Guard) (int, error) {
	f, ok := r.store.(unsafeFreer)
	if !unsafeUnconditionalReclaim || !ok {
		return r.store.Reclaim(ctx, gd, r.cfg.Grace)
	}
	now, err := r.store.Now(ctx)
	if err != nil {
		return 0, err
	}
	leases, err := r.store.Leases(ctx)
	if err != nil {
		return 0, err
	}
	var expired []NodeID
	for _, l := range leases {
		if l.ExpiresAt.Add(r.cfg.Grace).Before(now) {
			expired = append(expired, l.NodeID)
		}
	}
	prev, _ := staleViews.Swap(r, expired)
	stale, _ := prev.([]NodeID)
	if len(stale) == 0 {
		return 0, nil
	}
	return f.UnsafeFree(ctx, gd, stale...)
}
