package redis_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/internal/fakeclock"
	"github.com/idkeeper/idkeeper/internal/redistest"
	"github.com/idkeeper/idkeeper/redis"
)

const benchPool = 4096

// benchStore opens a store with a pool of 4,096 on srv, timed by Redis TIME.
func benchStore(b *testing.B, srv *redistest.Server, clock idkeeper.Clock) *redis.Store {
	b.Helper()
	s := open(b, srv, redis.Options{Clock: clock})
	if _, err := s.Init(b.Context(), benchPool); err != nil {
		b.Fatal(err)
	}
	return s
}

// fill grants n node IDs to n requesters, one each, from 16 goroutines.
func fill(b *testing.B, s *redis.Store, n int, first time.Duration) {
	b.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for w := range 16 {
		wg.Go(func() {
			for i := w; i < n; i += 16 {
				r := idkeeper.Requester{MachineID: "bench", PID: 1000 + i, StartedAt: t0}
				if _, err := s.Alloc(b.Context(), r, 1, first); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
}

// BenchmarkAllocRemove grants one node ID and gives it back, on an empty pool and
// on one with 4,000 of 4,096 leased: the two should cost about the same.
func BenchmarkAllocRemove(b *testing.B) {
	srv := redistest.Start(b)
	for _, leased := range []int{0, 4000} {
		b.Run(fmt.Sprintf("leased=%d", leased), func(b *testing.B) {
			s := benchStore(b, srv, nil)
			fill(b, s, leased, time.Hour)
			r := who(1)
			b.ResetTimer()
			for b.Loop() {
				g, err := s.Alloc(b.Context(), r, 1, time.Minute)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := s.Remove(b.Context(), r, g.Now); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkRenew renews a requester's 4 leases with 4,000 others leased.
func BenchmarkRenew(b *testing.B) {
	srv := redistest.Start(b)
	s := benchStore(b, srv, nil)
	fill(b, s, 4000, time.Hour)
	r := who(1)
	if _, err := s.Alloc(b.Context(), r, 4, time.Minute); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		if _, err := s.Renew(b.Context(), r, 48*time.Hour); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReclaim4096 reclaims a whole pool of expired leases, one per requester,
// in batches of DefaultReclaimBatch.
func BenchmarkReclaim4096(b *testing.B) {
	srv := redistest.Start(b)
	for b.Loop() {
		b.StopTimer()
		clk := fakeclock.New(t0)
		s := benchStore(b, srv, clk.Now)
		fill(b, s, benchPool, time.Minute)
		clk.Advance(time.Hour)
		b.StartTimer()
		n, err := s.Reclaim(b.Context(), 10*time.Minute)
		b.StopTimer()
		if err != nil || n != benchPool {
			b.Fatalf("Reclaim = %d, %v; want %d", n, err, benchPool)
		}
		if err := s.WipeForTest(b.Context()); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}

// BenchmarkCounts reads the counts of a pool with 4,000 of 4,096 leased.
func BenchmarkCounts(b *testing.B) {
	srv := redistest.Start(b)
	s := benchStore(b, srv, nil)
	fill(b, s, 4000, time.Hour)
	b.ResetTimer()
	for b.Loop() {
		c, err := s.Counts(b.Context())
		if err != nil || c.Leased != 4000 {
			b.Fatalf("Counts = %+v, %v", c, err)
		}
	}
}
