package snowflake

import (
	"slices"
	"sync"
	"testing"
	"time"
)

// reportRate reports IDs per second and the fraction of the default layout's
// ceiling that rate is for the given number of generators. The ceiling is
// time-bound, so run with -benchtime of at least 1s.
func reportRate(b *testing.B, ids int, elapsed time.Duration, generators int) {
	b.Helper()
	reportLayoutRate(b, DefaultLayout, ids, elapsed, generators)
}

// reportLayoutRate is reportRate for the ceiling of layout l.
func reportLayoutRate(b *testing.B, l Layout, ids int, elapsed time.Duration, generators int) {
	b.Helper()
	rate := float64(ids) / elapsed.Seconds()
	b.ReportMetric(rate, "ids/s")
	b.ReportMetric(rate/float64(int64(generators)*l.IDsPerSecond()), "ceiling-fraction")
}

// BenchmarkNextID measures one generator on the default layout, called from one
// goroutine.
func BenchmarkNextID(b *testing.B) { benchNextID(b, DefaultLayout) }

// benchLayouts are the layouts BenchmarkNextIDLayout measures (issue #22), with the
// ceiling of one node ID (2^SequenceBits IDs per millisecond).
var benchLayouts = []struct {
	name   string
	layout Layout
}{
	{"41-12-10", DefaultLayout}, // 1,024,000 IDs/s
	{"41-10-12", Layout{Epoch: DefaultEpoch, TimestampBits: 41, NodeBits: 10, SequenceBits: 12}}, // 4,096,000 IDs/s
	{"42-11-10", Layout{Epoch: DefaultEpoch, TimestampBits: 42, NodeBits: 11, SequenceBits: 10}}, // 1,024,000 IDs/s
	{"39-16-8", Layout{Epoch: DefaultEpoch, TimestampBits: 39, NodeBits: 16, SequenceBits: 8}},   // 256,000 IDs/s
}

// BenchmarkNextIDLayout is BenchmarkNextID on each of benchLayouts: one generator,
// one goroutine calling NextID back to back, the rate against that layout's
// ceiling. Run it for a few seconds of IDs (-benchtime=3s): the first and the last
// millisecond are partly used.
func BenchmarkNextIDLayout(b *testing.B) {
	for _, c := range benchLayouts {
		b.Run(c.name, func(b *testing.B) { benchNextID(b, c.layout) })
	}
}

// benchNextID measures one generator on layout l, called from one goroutine.
func benchNextID(b *testing.B, l Layout) {
	g, err := New(l, 1, Options{})
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
	reportLayoutRate(b, l, b.N, time.Since(start), 1)
}

// BenchmarkNextIDParallel4 measures four generators, each driven by its own
// goroutine, on however many CPUs GOMAXPROCS allows. Its ceiling is 4 × 1,024,000
// IDs/s.
func BenchmarkNextIDParallel4(b *testing.B) {
	const n = 4
	gens := make([]*Generator, n)
	for i := range gens {
		g, err := New(DefaultLayout, int64(i), Options{})
		if err != nil {
			b.Fatal(err)
		}
		gens[i] = g
	}
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for i, g := range gens {
		count := b.N / n
		if i < b.N%n {
			count++
		}
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
	reportRate(b, b.N, time.Since(start), n)
}

// BenchmarkNextIDs measures one generator filling batches of 256 IDs; each op is one
// ID, so ns/op and allocs/op compare with BenchmarkNextID.
func BenchmarkNextIDs(b *testing.B) {
	g, err := New(DefaultLayout, 1, Options{})
	if err != nil {
		b.Fatal(err)
	}
	var buf [256]int64
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for done := 0; done < b.N; {
		k, err := g.NextIDs(buf[:min(len(buf), b.N-done)])
		if err != nil {
			b.Fatal(err)
		}
		done += k
	}
	reportRate(b, b.N, time.Since(start), 1)
}

// wideLayout has 16 sequence bits (65,536 IDs per ms): the ceiling does not bind,
// so ns/op is the cost of a call.
var wideLayout = Layout{Epoch: DefaultEpoch, TimestampBits: 41, NodeBits: 6, SequenceBits: 16}

// BenchmarkNextIDWide measures the cost of an uncontended NextID that never waits:
// one generator on wideLayout, one goroutine.
func BenchmarkNextIDWide(b *testing.B) {
	g, err := New(wideLayout, 1, Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := g.NextID(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkNextIDWideContended is BenchmarkNextIDWide with GOMAXPROCS goroutines
// on the one generator (b.RunParallel): the CAS retries show.
func BenchmarkNextIDWideContended(b *testing.B) {
	g, err := New(wideLayout, 1, Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := g.NextID(); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkNextIDsParallel16 measures one generator at its ceiling with 16
// goroutines each asking for batches of 1,000 IDs (the gateway's load on one node
// ID); each op is one ID. Besides the rate it reports the latency of a batch: the
// median and the 99th percentile, in milliseconds. A fair queue answers every batch
// in about 16 × 1,000 / 1,024,000 IDs/s = 15.6 ms.
func BenchmarkNextIDsParallel16(b *testing.B) {
	const goroutines, batch = 16, 1000
	g, err := New(DefaultLayout, 1, Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	lat := make([][]time.Duration, goroutines)
	var wg sync.WaitGroup
	for i := range goroutines {
		wg.Go(func() {
			buf := make([]int64, batch)
			count := b.N / goroutines
			if i < b.N%goroutines {
				count++
			}
			for done := 0; done < count; {
				t0 := time.Now()
				k, err := g.NextIDs(buf[:min(batch, count-done)])
				if err != nil {
					b.Error(err)
					return
				}
				lat[i] = append(lat[i], time.Since(t0))
				done += k
			}
		})
	}
	wg.Wait()
	reportRate(b, b.N, time.Since(start), 1)
	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	if len(all) > 0 {
		slices.Sort(all)
		b.ReportMetric(float64(all[len(all)/2])/1e6, "p50-ms")
		b.ReportMetric(float64(all[len(all)*99/100])/1e6, "p99-ms")
	}
}
