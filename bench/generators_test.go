package bench

import (
	"sync"
	"syscall"
	"testing"
	"time"

	bwsnowflake "github.com/bwmarrin/snowflake"
	"github.com/sony/sonyflake"

	"github.com/idkeeper/idkeeper/snowflake"
)

// Ceilings in IDs per second of one generator (one node / machine ID).
const (
	idkeeperCeiling  = 1024 * 1000 // 10 sequence bits per millisecond
	bwmarrinCeiling  = 4096 * 1000 // 12 step bits per millisecond
	sonyflakeCeiling = 256 * 100   // 8 sequence bits per 10 ms
)

// mint is one call to a generator under test.
type mint func() error

type contender struct {
	name    string
	ceiling float64
	make    func(tb testing.TB, node int) mint
}

var contenders = []contender{
	{"idkeeper", idkeeperCeiling, func(tb testing.TB, node int) mint {
		g, err := snowflake.New(snowflake.DefaultLayout, int64(node), snowflake.Options{})
		if err != nil {
			tb.Fatal(err)
		}
		return func() error { _, err := g.NextID(); return err }
	}},
	{"bwmarrin", bwmarrinCeiling, func(tb testing.TB, node int) mint {
		n, err := bwsnowflake.NewNode(int64(node))
		if err != nil {
			tb.Fatal(err)
		}
		return func() error { n.Generate(); return nil }
	}},
	{"sonyflake", sonyflakeCeiling, func(tb testing.TB, node int) mint {
		sf, err := sonyflake.New(sonyflake.Settings{MachineID: func() (uint16, error) { return uint16(node), nil }})
		if err != nil {
			tb.Fatal(err)
		}
		return func() error { _, err := sf.NextID(); return err }
	}},
}

// BenchmarkGenerator runs each generator from one goroutine.
func BenchmarkGenerator(b *testing.B) {
	for _, c := range contenders {
		b.Run(c.name, func(b *testing.B) {
			next := c.make(b, 1)
			b.ReportAllocs()
			b.ResetTimer()
			start := time.Now()
			for range b.N {
				if err := next(); err != nil {
					b.Fatal(err)
				}
			}
			rate := float64(b.N) / time.Since(start).Seconds()
			b.ReportMetric(rate, "ids/s")
			b.ReportMetric(rate/c.ceiling, "ceiling-fraction")
		})
	}
}

// BenchmarkGenerator4 runs four generators of each kind (node IDs 1..4), each from
// its own goroutine; the ceiling is four times one generator's.
func BenchmarkGenerator4(b *testing.B) {
	const n = 4
	for _, c := range contenders {
		b.Run(c.name, func(b *testing.B) {
			nexts := make([]mint, n)
			for i := range nexts {
				nexts[i] = c.make(b, i+1)
			}
			b.ReportAllocs()
			b.ResetTimer()
			start := time.Now()
			var wg sync.WaitGroup
			for i, next := range nexts {
				count := b.N / n
				if i < b.N%n {
					count++
				}
				wg.Go(func() {
					for range count {
						if err := next(); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			rate := float64(b.N) / time.Since(start).Seconds()
			b.ReportMetric(rate, "ids/s")
			b.ReportMetric(rate/(n*c.ceiling), "ceiling-fraction")
		})
	}
}

func cpuTime(tb testing.TB) time.Duration {
	tb.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestCPUTwoGoroutines saturates each generator with two goroutines for one second
// and logs IDs/s and the CPU time the process used meanwhile. Only IdKeeper's
// bound (0.5 CPU-seconds) is asserted; the others are there for comparison.
func TestCPUTwoGoroutines(t *testing.T) {
	if testing.Short() {
		t.Skip("takes three seconds")
	}
	const run = time.Second
	for _, c := range contenders {
		next := c.make(t, 1)
		var mu sync.Mutex
		total := 0
		cpu0, start := cpuTime(t), time.Now()
		var wg sync.WaitGroup
		for range 2 {
			wg.Go(func() {
				n := 0
				for time.Since(start) < run {
					if err := next(); err != nil {
						t.Error(err)
						return
					}
					n++
				}
				mu.Lock()
				total += n
				mu.Unlock()
			})
		}
		wg.Wait()
		cpu, elapsed := cpuTime(t)-cpu0, time.Since(start)
		rate := float64(total) / elapsed.Seconds()
		t.Logf("%-9s 2 goroutines %v: %9.0f IDs/s = %.3f of its ceiling, CPU %v (user+sys)",
			c.name, elapsed.Round(time.Millisecond), rate, rate/c.ceiling, cpu.Round(time.Millisecond))
		if c.name == "idkeeper" && cpu > 500*time.Millisecond {
			t.Errorf("idkeeper used %v of CPU, want at most 500ms", cpu)
		}
	}
}
