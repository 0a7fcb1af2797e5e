package bolt_test

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/bolt"
	"github.com/idkeeper/idkeeper/internal/harness/fakeclock"
)

const benchPool = 4096

// benchStore opens a store with a pool of 4,096 node IDs on a fake clock. Unless
// sync, it skips fsync, to measure the store's own work apart from the disk's.
func benchStore(b *testing.B, sync bool) (*bolt.Store, *fakeclock.Clock) {
	b.Helper()
	clock := fakeclock.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	s, err := bolt.Open(filepath.Join(b.TempDir(), "bench.db"),
		bolt.Options{Clock: clock.Now, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	if !sync {
		s.NoSyncForTest()
	}
	res, err := s.Init(b.Context(), idkeeper.PoolSpec{Nodes: benchPool})
	if err != nil {
		b.Fatal(err)
	}
	benchGuard = idkeeper.Guard{Generation: res.Generation.ID}
	return s, clock
}

// benchGuard is the guard of the store benchStore opened last, without a clock
// comparison; benchmarks run one after another.
var benchGuard idkeeper.Guard

func benchReq(i int) idkeeper.Requester {
	return idkeeper.Requester{MachineID: "bench-host", PID: 1 + i, StartedAt: time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC),
		Instance: "bench"}
}

func alloc(s *bolt.Store, ctx context.Context, r idkeeper.Requester, count int, d time.Duration) (idkeeper.Grant, error) {
	return s.Alloc(ctx, benchGuard, idkeeper.AllocParams{Requester: r, KeyID: "bench", Count: count, First: d})
}

// fill leases n node IDs, 128 per requester, starting at requester first.
func fill(b *testing.B, s *bolt.Store, first, n int, d time.Duration) {
	b.Helper()
	for i := 0; n > 0; i++ {
		count := min(n, 128)
		if _, err := alloc(s, b.Context(), benchReq(first+i), count, d); err != nil {
			b.Fatal(err)
		}
		n -= count
	}
}

// BenchmarkAllocRemove grants one node ID and releases it again, on an empty pool
// and on one with 4,000 of 4,096 node IDs leased: the cost must not grow with the
// leases. The fsync variants show what the disk adds: two fsyncs per round.
func BenchmarkAllocRemove(b *testing.B) {
	for _, c := range []struct {
		name   string
		leased int
		sync   bool
	}{{"empty", 0, false}, {"4000leased", 4000, false}, {"empty/fsync", 0, true}, {"4000leased/fsync", 4000, true}} {
		b.Run(c.name, func(b *testing.B) {
			leased := c.leased
			s, clock := benchStore(b, c.sync)
			fill(b, s, 1000, leased, time.Hour)
			r := benchReq(0)
			ctx := b.Context()
			for b.Loop() {
				if _, err := alloc(s, ctx, r, 1, 10*time.Minute); err != nil {
					b.Fatal(err)
				}
				clock.Advance(time.Millisecond)
				if _, err := s.Remove(ctx, benchGuard, idkeeper.RemoveParams{Requester: r, KeyID: "bench", MintedUpTo: clock.Now()}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkRenew renews a requester holding 4 node IDs, with 4,000 others leased.
func BenchmarkRenew(b *testing.B) {
	s, clock := benchStore(b, false)
	fill(b, s, 1000, 4000, time.Hour)
	r := benchReq(0)
	ctx := b.Context()
	if _, err := alloc(s, ctx, r, 4, 10*time.Minute); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		clock.Advance(time.Millisecond)
		if g, err := s.Renew(ctx, benchGuard, idkeeper.RenewParams{Requester: r, KeyID: "bench", Duration: 48 * time.Hour}); err != nil || len(g.Leases) != 4 {
			b.Fatal(g, err)
		}
	}
}

// BenchmarkReclaim4096 reclaims 4,096 expired leases in one call.
func BenchmarkReclaim4096(b *testing.B) {
	s, clock := benchStore(b, false)
	ctx := b.Context()
	for round := 0; b.Loop(); round++ {
		b.StopTimer()
		fill(b, s, round*100, benchPool, 10*time.Minute)
		clock.Advance(time.Hour)
		b.StartTimer()
		if n, err := s.Reclaim(ctx, benchGuard, 10*time.Minute); err != nil || n != benchPool {
			b.Fatal(n, err)
		}
	}
}

// BenchmarkCounts counts a pool with 4,000 node IDs leased, and one where they are
// all expired but not reclaimed (Counts walks the leases in grace).
func BenchmarkCounts(b *testing.B) {
	for _, expired := range []bool{false, true} {
		b.Run(map[bool]string{false: "4000leased", true: "4000inGrace"}[expired], func(b *testing.B) {
			s, clock := benchStore(b, false)
			fill(b, s, 1000, 4000, 10*time.Minute)
			if expired {
				clock.Advance(time.Hour)
			}
			ctx := b.Context()
			for b.Loop() {
				if c, err := s.Counts(ctx); err != nil || c.Leased+c.InGrace != 4000 {
					b.Fatal(c, err)
				}
			}
		})
	}
}
