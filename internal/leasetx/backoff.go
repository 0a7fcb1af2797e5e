package leasetx

import (
	"context"
	"math/rand/v2"
	"time"
)

// Backoff waits before a store's attempt after its n-th conflicting commit (a
// failed compare in etcd, a serialization failure in PostgreSQL): at once after
// the first, then a random time up to 1 ms · 2^n, at most 100 ms, so that
// writers that collided spread out. It returns ctx's error when ctx ends first.
func Backoff(ctx context.Context, n int) error {
	if n <= 1 {
		return ctx.Err()
	}
	d := time.Duration(rand.Int64N(int64(min(time.Millisecond<<min(n, 10), 100*time.Millisecond))))
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
