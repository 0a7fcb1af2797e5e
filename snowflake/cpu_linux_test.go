//go:build linux && !race

package snowflake

import (
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// cpuTime is the user plus system CPU time of this process so far.
func cpuTime(t *testing.T) time.Duration {
	t.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestSaturatedGeneratorCPU checks that waiting for the next millisecond does not
// burn a core: two goroutines hammer one generator for one second, which keeps it at
// its ceiling, and the whole process may use at most 0.5 CPU-seconds meanwhile. A
// spinning wait would use about 2. It measures resources, not speed, so a slow or
// busy machine does not make it fail; the race detector would, hence the build tag.
func TestSaturatedGeneratorCPU(t *testing.T) {
	if testing.Short() {
		t.Skip("takes one second")
	}
	const run = time.Second
	const limit = 500 * time.Millisecond
	g := mustNew(t, DefaultLayout, 1, Options{})
	var minted atomic.Int64
	cpu0, start := cpuTime(t), time.Now()
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			n := int64(0)
			for time.Since(start) < run {
				for range 64 {
					if _, err := g.NextID(); err != nil {
						t.Error(err)
						return
					}
				}
				n += 64
			}
			minted.Add(n)
		})
	}
	wg.Wait()
	cpu, elapsed := cpuTime(t)-cpu0, time.Since(start)
	rate := float64(minted.Load()) / elapsed.Seconds()
	t.Logf("2 goroutines, 1 generator, %v: %d IDs (%.0f IDs/s, %.3f of the ceiling), CPU %v (user+sys, whole process)",
		elapsed.Round(time.Millisecond), minted.Load(), rate, rate/float64(DefaultLayout.IDsPerSecond()), cpu.Round(time.Millisecond))
	if cpu > limit {
		t.Fatalf("used %v of CPU in %v, want at most %v", cpu, elapsed, limit)
	}
}
