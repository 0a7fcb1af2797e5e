//go:build unix

package client_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/client"
	"github.com/idkeeper/idkeeper/snowflake"
)

// wideLayout has 16 sequence bits: 65,536,000 IDs/s per node ID, far above what one
// core mints, so that benchmarks on it measure the cost of a call, not the ceiling.
var wideLayout = snowflake.Layout{Epoch: snowflake.DefaultEpoch, TimestampBits: 41, NodeBits: 6, SequenceBits: 16}

// benchSession opens a session of count node IDs on a loopback registry with the
// system clock.
func benchSession(b *testing.B, cfg idkeeper.Config, count int) *client.Session {
	b.Helper()
	url, key, stop := startDemoRegistry(cfg)
	b.Cleanup(stop)
	s, err := client.Start(context.Background(), client.Config{
		ServerURL: url, APIKey: key, Count: count, Requester: requester(),
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s
}

func reportRate(b *testing.B, ids int, elapsed time.Duration) {
	b.ReportMetric(float64(ids)/elapsed.Seconds(), "ids/s")
}

// BenchmarkSessionNextID mints through Session.NextID, one goroutine, one node ID,
// default layout: bound by the 1,024,000 IDs/s ceiling of a node ID.
func BenchmarkSessionNextID(b *testing.B) { benchNextID(b, idkeeper.Config{}) }

// benchNextID mints through Session.NextID of a one-node session on one goroutine
// and reports the rate.
func benchNextID(b *testing.B, cfg idkeeper.Config) {
	s := benchSession(b, cfg, 1)
	b.ReportAllocs()
	start := time.Now()
	for b.Loop() {
		if _, err := s.NextID(); err != nil {
			b.Fatal(err)
		}
	}
	reportRate(b, b.N, time.Since(start))
}

// BenchmarkSessionNextIDParallel4 is Session.NextID from GOMAXPROCS goroutines over
// four node IDs (round robin): ceiling 4,096,000 IDs/s.
func BenchmarkSessionNextIDParallel4(b *testing.B) {
	s := benchSession(b, idkeeper.Config{}, 4)
	b.ReportAllocs()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := s.NextID(); err != nil {
				b.Error(err)
				return
			}
		}
	})
	reportRate(b, b.N, time.Since(start))
}

// BenchmarkGeneratorPinned4 is four goroutines, each pinned to its own node ID with
// Session.Generator: ceiling 4,096,000 IDs/s.
func BenchmarkGeneratorPinned4(b *testing.B) {
	const n = 4
	s := benchSession(b, idkeeper.Config{}, n)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for i := range n {
		count := b.N / n
		if i < b.N%n {
			count++
		}
		g := s.Generator(i)
		wg.Go(func() {
			for range count {
				if _, err := g.NextID(); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	reportRate(b, b.N, time.Since(start))
}

// BenchmarkSessionNextIDs fills sorted batches of 4096 over four node IDs; one op
// is one ID.
func BenchmarkSessionNextIDs(b *testing.B) {
	s := benchSession(b, idkeeper.Config{}, 4)
	buf := make([]int64, 4096)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for done := 0; done < b.N; {
		k := min(len(buf), b.N-done)
		if err := s.NextIDs(buf[:k]); err != nil {
			b.Fatal(err)
		}
		done += k
	}
	reportRate(b, b.N, time.Since(start))
}

// BenchmarkSessionOverhead measures the cost of one Session.NextID call where the
// sequence never runs out (wideLayout); BenchmarkGeneratorOverhead is the bare
// snowflake generator on the same layout, for comparison.
func BenchmarkSessionOverhead(b *testing.B) { benchNextID(b, idkeeper.Config{Layout: wideLayout}) }

func BenchmarkGeneratorOverhead(b *testing.B) {
	g, err := snowflake.New(wideLayout, 1, snowflake.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	start := time.Now()
	for b.Loop() {
		if _, err := g.NextID(); err != nil {
			b.Fatal(err)
		}
	}
	reportRate(b, b.N, time.Since(start))
}

// TestSessionNextIDDoesNotAllocate keeps the issuing path allocation-free.
func TestSessionNextIDDoesNotAllocate(t *testing.T) {
	url, key, stop := startDemoRegistry(idkeeper.Config{Layout: wideLayout})
	defer stop()
	s, err := client.Start(context.Background(), client.Config{
		ServerURL: url, APIKey: key, Count: 2, Requester: requester(), Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	buf := make([]int64, 100)
	allocs := testing.AllocsPerRun(1000, func() {
		if _, err := s.NextID(); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Generator(1).NextID(); err != nil {
			t.Fatal(err)
		}
		if err := s.NextIDs(buf); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per NextID + Generator.NextID + NextIDs", allocs)
	}
	s.Close()
	allocs = testing.AllocsPerRun(100, func() { s.NextID() })
	if allocs != 0 {
		t.Fatalf("refusing allocates: %v", allocs)
	}
}
