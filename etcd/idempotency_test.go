package etcd_test

import (
	"testing"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/etcd"
	"github.com/idkeeper/idkeeper/idempotency"
	"github.com/idkeeper/idkeeper/internal/harness/etcdtest"
	"github.com/idkeeper/idkeeper/internal/harness/fakeclock"
	"github.com/idkeeper/idkeeper/internal/harness/idemtest"
)

// The idempotency suite's purge cases skip a store that is not a Purger: a renamed
// Purge must fail the build, not skip them.
var _ idemtest.Purger = (*etcd.Store)(nil)

func TestIdempotencyContract(t *testing.T) {
	srv := etcdtest.Start(t)
	idemtest.Run(t, func(t *testing.T, clock idkeeper.Clock) idempotency.Store {
		return open(t, srv.Client(), etcd.Options{Clock: clock})
	})
}

// The store counts records, so the contract suite runs its cap and Stats cases.
var _ idempotency.CountingStore = (*etcd.Store)(nil)

// A record completed with a ttl that ends it when its marker would have lapsed
// keeps index entries of the same keys: one transaction that puts them, not one
// that deletes and puts them (which etcd refuses).
func TestIdempotencyCompleteAtSameExpiry(t *testing.T) {
	srv := etcdtest.Start(t)
	clock := fakeclock.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	s := open(t, srv.Client(), etcd.Options{Clock: clock.Now})
	ctx := t.Context()
	for _, o := range []idempotency.Store{s, s.Owned("owner", 5)} {
		if _, started, err := o.Begin(ctx, "scope", "fp", "tok", time.Minute); err != nil || !started {
			t.Fatalf("Begin: %v %v", started, err)
		}
		if err := o.Complete(ctx, "scope", "tok", idempotency.Stored{Outcome: 200}, time.Minute); err != nil {
			t.Fatalf("Complete: %v", err)
		}
		if recs, _, err := s.Stats(ctx); err != nil || recs != 1 {
			t.Fatalf("Stats: %d, %v", recs, err)
		}
		clock.Advance(time.Minute)
		if n, err := s.Purge(ctx); err != nil || n != 1 {
			t.Fatalf("Purge: %d, %v", n, err)
		}
	}
}
