package postgres_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/internal/harness/fakeclock"
	"github.com/idkeeper/idkeeper/internal/harness/pgtest"
	"github.com/idkeeper/idkeeper/postgres"
)

const benchPool = 4096

var benchT0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// benchStore opens a store with a pool of 4,096 on srv, on a fake clock, and
// returns it with its clock and the guard of its generation.
func benchStore(b *testing.B, srv *pgtest.Server) (*postgres.Store, *fakeclock.Clock, idkeeper.Guard) {
	b.Helper()
	clock := fakeclock.New(benchT0)
	s := open(b, srv, postgres.Options{Clock: clock.Now})
	res, err := s.Init(b.Context(), idkeeper.PoolSpec{Nodes: benchPool})
	if err != nil {
		b.Fatal(err)
	}
	return s, clock, idkeeper.Guard{Generation: res.Generation.ID}
}

func benchReq(i int) idkeeper.Requester {
	return idkeeper.Requester{MachineID: "bench", PID: 1 + i, StartedAt: benchT0}
}

func benchAlloc(b *testing.B, s *postgres.Store, g idkeeper.Guard, r idkeeper.Requester, count int, first time.Duration) idkeeper.Grant {
	b.Helper()
	gr, err := s.Alloc(b.Context(), g, idkeeper.AllocParams{Requester: r, KeyID: "bench", Count: count, First: first})
	if err != nil {
		b.Fatal(err)
	}
	return gr
}

// fill grants n node IDs to n requesters, one each, as the other stores'
// benchmarks do.
func fill(b *testing.B, s *postgres.Store, g idkeeper.Guard, n int, first time.Duration) {
	b.Helper()
	for i := range n {
		benchAlloc(b, s, g, benchReq(1000+i), 1, first)
	}
}

// BenchmarkAllocRemove grants one node ID and gives it back, on an empty pool and
// on one with 4,000 of 4,096 leased: the two should cost about the same (the
// free indexes are partial indexes, no step scans the pool).
func BenchmarkAllocRemove(b *testing.B) {
	for _, sv := range benchServers(b) {
		for _, leased := range []int{0, 4000} {
			b.Run(fmt.Sprintf("%s/leased=%d", sv.name, leased), func(b *testing.B) {
				s, clock, g := benchStore(b, sv.srv)
				fill(b, s, g, leased, time.Hour)
				r := benchReq(0)
				for b.Loop() {
					gr := benchAlloc(b, s, g, r, 1, time.Minute)
					clock.Advance(time.Millisecond)
					if _, err := s.Remove(b.Context(), g, idkeeper.RemoveParams{Requester: r, KeyID: "bench", MintedUpTo: gr.Now}); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkRenew renews a requester's 4 leases with 4,000 others leased.
func BenchmarkRenew(b *testing.B) {
	for _, sv := range benchServers(b) {
		b.Run(sv.name, func(b *testing.B) {
			s, clock, g := benchStore(b, sv.srv)
			fill(b, s, g, 4000, time.Hour)
			r := benchReq(0)
			benchAlloc(b, s, g, r, 4, time.Minute)
			for b.Loop() {
				clock.Advance(time.Millisecond)
				gr, err := s.Renew(b.Context(), g, idkeeper.RenewParams{Requester: r, KeyID: "bench", Duration: 48 * time.Hour})
				if err != nil || len(gr.Leases) != 4 {
					b.Fatal(gr, err)
				}
			}
		})
	}
}

// BenchmarkFleetAlloc is a fleet of 4,000 processes allocating at once, 64
// calls in flight (the figure docs/benchmarks.md sets beside bolt's and
// Redis's): one iteration grants 4,000 node IDs of a 4,096 pool, one each.
func BenchmarkFleetAlloc(b *testing.B) {
	const fleet, callers = 4000, 64
	for _, sv := range benchServers(b) {
		b.Run(sv.name, func(b *testing.B) {
			var elapsed time.Duration
			for b.Loop() {
				b.StopTimer()
				s, _, g := benchStore(b, sv.srv)
				next := make(chan int, fleet)
				for i := range fleet {
					next <- i
				}
				close(next)
				errs := make(chan error, callers)
				b.StartTimer()
				start := time.Now()
				for range callers {
					go func() {
						for i := range next {
							if _, err := s.Alloc(b.Context(), g, idkeeper.AllocParams{Requester: benchReq(i), KeyID: "bench",
								Count: 1, First: time.Hour}); err != nil {
								errs <- err
								return
							}
						}
						errs <- nil
					}()
				}
				for range callers {
					if err := <-errs; err != nil {
						b.Fatal(err)
					}
				}
				elapsed += time.Since(start)
			}
			b.ReportMetric(float64(fleet*b.N)/elapsed.Seconds(), "grants/s")
		})
	}
}

// fillBatch grants n node IDs, 128 per requester from requester first: the
// fast fill of BenchmarkReclaim4096, whose rounds fill the whole pool.
func fillBatch(b *testing.B, s *postgres.Store, g idkeeper.Guard, first, n int, lease time.Duration) {
	b.Helper()
	for i := 0; n > 0; i++ {
		count := min(n, 128)
		benchAlloc(b, s, g, benchReq(first+i), count, lease)
		n -= count
	}
}

// BenchmarkReclaim4096 reclaims 4,096 expired leases in one call, as bolt's,
// Redis's and etcd's do.
func BenchmarkReclaim4096(b *testing.B) {
	for _, sv := range benchServers(b) {
		b.Run(sv.name, func(b *testing.B) {
			s, clock, g := benchStore(b, sv.srv)
			for round := 0; b.Loop(); round++ {
				b.StopTimer()
				fillBatch(b, s, g, 100000+round*100, benchPool, time.Minute)
				clock.Advance(time.Hour)
				b.StartTimer()
				if n, err := s.Reclaim(b.Context(), g, 10*time.Minute); err != nil || n != benchPool {
					b.Fatal(n, err)
				}
			}
		})
	}
}

// BenchmarkCounts counts a pool with 4,000 node IDs leased, and one where they
// are all expired but not reclaimed (in grace).
func BenchmarkCounts(b *testing.B) {
	for _, sv := range benchServers(b) {
		for _, expired := range []bool{false, true} {
			b.Run(sv.name+"/"+map[bool]string{false: "4000leased", true: "4000inGrace"}[expired], func(b *testing.B) {
				s, clock, g := benchStore(b, sv.srv)
				fillBatch(b, s, g, 1000, 4000, time.Minute)
				if expired {
					clock.Advance(time.Hour)
				}
				for b.Loop() {
					if c, err := s.Counts(b.Context()); err != nil || c.Leased+c.InGrace != 4000 {
						b.Fatal(c, err)
					}
				}
			})
		}
	}
}
