package clockcheck

import (
	"math"
	"testing"
	"time"
)

// TestReadKernelClock reads this machine's kernel state for real, read-only:
// the call works without privilege and its numbers are in range. It asserts
// nothing about whether this machine is synced.
func TestReadKernelClock(t *testing.T) {
	r, err := ReadKernelClock()
	if err != nil {
		t.Fatal(err)
	}
	if r.State < 0 || r.State > KernelTimeError || r.MaxError < 0 || r.EstError < 0 {
		t.Fatalf("reading %+v", r)
	}
	t.Logf("this machine's kernel: %+v", r)
}

func TestMicrosecondsSaturates(t *testing.T) {
	for us, want := range map[int64]time.Duration{
		16_000_000: 16 * time.Second, -1: -time.Microsecond,
		math.MaxInt64: math.MaxInt64, math.MinInt64: math.MinInt64,
	} {
		if got := microseconds(us); got != want {
			t.Errorf("microseconds(%d) = %s, want %s", us, got, want)
		}
	}
}
