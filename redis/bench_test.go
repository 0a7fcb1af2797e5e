package redis_test

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/internal/harness/fakeclock"
	"github.com/idkeeper/idkeeper/internal/harness/redistest"
	"github.com/idkeeper/idkeeper/redis"
)

const benchPool = 4096

// benchStore opens a store with a pool of 4,096 on srv, timed by Redis TIME, and
// returns it with the guard of its generation.
func benchStore(b *testing.B, srv *redistest.Server, clock idkeeper.Clock) (*redis.Store, idkeeper.Guard) {
	b.Helper()
	s := open(b, srv, redis.Options{Clock: clock})
	return s, initGuard(b, s, benchPool)
}

// fill grants n node IDs to n requesters, one each, from 16 goroutines.
func fill(b *testing.B, s *redis.Store, g idkeeper.Guard, n int, first time.Duration) {
	b.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for w := range 16 {
		wg.Go(func() {
			for i := w; i < n; i += 16 {
				r := idkeeper.Requester{MachineID: "bench", PID: 1000 + i, StartedAt: t0}
				if _, err := s.Alloc(b.Context(), g, allocP(r, 1, first)); err != nil {
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

// scriptTime resets the command statistics of srv and returns a func that reports,
// as the metric redis-µs/op, the time Redis spent running scripts per operation:
// the scripts' own cost, free of the client's and the network's noise.
func scriptTime(b *testing.B, srv *redistest.Server) func() {
	b.Helper()
	c := rawClient(b, srv)
	if err := c.ConfigResetStat(b.Context()).Err(); err != nil {
		b.Fatal(err)
	}
	return func() {
		info, err := c.Info(b.Context(), "commandstats").Result()
		if err != nil {
			b.Fatal(err)
		}
		var usec float64
		for _, line := range strings.Split(info, "\n") {
			name, stats, _ := strings.Cut(strings.TrimSpace(line), ":")
			if name != "cmdstat_evalsha" && name != "cmdstat_eval" {
				continue
			}
			for _, kv := range strings.Split(stats, ",") {
				if v, ok := strings.CutPrefix(kv, "usec="); ok {
					n, _ := strconv.ParseFloat(v, 64)
					usec += n
				}
			}
		}
		b.ReportMetric(usec/float64(b.N), "redis-µs/op")
	}
}

// BenchmarkAllocRemove grants one node ID and gives it back, on an empty pool and
// on one with 4,000 of 4,096 leased: the two should cost about the same.
func BenchmarkAllocRemove(b *testing.B) {
	srv := redistest.Start(b)
	for _, leased := range []int{0, 4000} {
		b.Run(fmt.Sprintf("leased=%d", leased), func(b *testing.B) {
			s, g := benchStore(b, srv, nil)
			fill(b, s, g, leased, time.Hour)
			r := who(1)
			report := scriptTime(b, srv)
			b.ResetTimer()
			for b.Loop() {
				gr, err := s.Alloc(b.Context(), g, allocP(r, 1, time.Minute))
				if err != nil {
					b.Fatal(err)
				}
				if _, err := s.Remove(b.Context(), g, removeP(r, gr.Now)); err != nil {
					b.Fatal(err)
				}
			}
			report()
		})
	}
}

// BenchmarkRenew renews a requester's 4 leases with 4,000 others leased.
func BenchmarkRenew(b *testing.B) {
	srv := redistest.Start(b)
	s, g := benchStore(b, srv, nil)
	fill(b, s, g, 4000, time.Hour)
	r := who(1)
	if _, err := s.Alloc(b.Context(), g, allocP(r, 4, time.Minute)); err != nil {
		b.Fatal(err)
	}
	report := scriptTime(b, srv)
	b.ResetTimer()
	for b.Loop() {
		if _, err := s.Renew(b.Context(), g, renewP(r, 48*time.Hour)); err != nil {
			b.Fatal(err)
		}
	}
	report()
}

// BenchmarkReclaim4096 reclaims a whole pool of expired leases, one per requester,
// in batches of DefaultReclaimBatch.
func BenchmarkReclaim4096(b *testing.B) {
	srv := redistest.Start(b)
	for b.Loop() {
		b.StopTimer()
		clk := fakeclock.New(t0)
		s, g := benchStore(b, srv, clk.Now)
		fill(b, s, g, benchPool, time.Minute)
		clk.Advance(time.Hour)
		b.StartTimer()
		n, err := s.Reclaim(b.Context(), g, 10*time.Minute)
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
	s, g := benchStore(b, srv, nil)
	fill(b, s, g, 4000, time.Hour)
	b.ResetTimer()
	for b.Loop() {
		c, err := s.Counts(b.Context())
		if err != nil || c.Leased != 4000 {
			b.Fatalf("Counts = %+v, %v", c, err)
		}
	}
}
