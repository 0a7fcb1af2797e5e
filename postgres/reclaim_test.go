package postgres_test

import (
	"testing"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/internal/harness/fakeclock"
	"github.com/idkeeper/idkeeper/postgres"
)

// Reclaim ends more leases than one batch holds in several transactions: every
// lease past expiry + grace is ended, none that is not, and the pool counts add
// up afterwards.
func TestReclaim_MoreThanOneBatch(t *testing.T) {
	clock := fakeclock.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	s := open(t, sharedServer(t), postgres.Options{Clock: clock.Now})
	ctx := t.Context()
	const pool, expiring = 2048, 2*postgres.ReclaimBatch + 7
	res, err := s.Init(ctx, idkeeper.PoolSpec{Nodes: pool})
	if err != nil {
		t.Fatal(err)
	}
	g := idkeeper.Guard{Generation: res.Generation.ID}
	grant := func(first, n int, lease time.Duration) {
		for i := 0; n > 0; i++ {
			count := min(n, 128)
			r := idkeeper.Requester{MachineID: "reclaim", PID: first + i, StartedAt: time.Unix(1, 0), Instance: "i"}
			if _, err := s.Alloc(ctx, g, idkeeper.AllocParams{Requester: r, KeyID: "k", Count: count, First: lease}); err != nil {
				t.Fatal(err)
			}
			n -= count
		}
	}
	grant(1, expiring, time.Minute)
	grant(1000, 100, time.Hour)
	clock.Advance(30 * time.Minute)
	n, err := s.Reclaim(ctx, g, 10*time.Minute)
	if err != nil || n != expiring {
		t.Fatalf("Reclaim: %d, %v; want %d", n, err, expiring)
	}
	c, err := s.Counts(ctx)
	if err != nil || c.Leased != 100 || c.InGrace != 0 || c.Remaining != pool-100 {
		t.Fatalf("after the reclaim: %+v, %v", c, err)
	}
	if n, err := s.Reclaim(ctx, g, 10*time.Minute); err != nil || n != 0 {
		t.Fatalf("a second Reclaim: %d, %v", n, err)
	}
}
