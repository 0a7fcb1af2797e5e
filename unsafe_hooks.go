//go:build !chaos_unsafe

package idkeeper

import (
	"context"
	"time"
)

// This file and unsafe_hooks_chaos.go are the two builds of the points where the
// fault-injection suite (internal/chaos) switches a safety mechanism off to prove
// its checker can fail. Only a binary built with -tags chaos_unsafe has the switches;
// this build is the production one and does exactly what the names say.

// resetUntil is the quarantine end and watermark floor after a store reset at now:
// now + d, d being the lease duration plus grace (DESIGN §7).
func resetUntil(now time.Time, d time.Duration) time.Time { return now.Add(d) }

// reclaim is the cleanup job's reclaim: the store's conditional, atomic Reclaim.
func (r *Registry) reclaim(ctx context.Context, gd Guard) (int, error) {
	return r.store.Reclaim(ctx, gd, r.cfg.Grace)
}
