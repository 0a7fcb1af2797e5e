package account

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper/protocol"
)

// A table at LoginThrottleEntries, of the longest names and IPv6 sources, stays
// within the bytes the doc of LoginThrottleEntries promises (about 210 bytes an
// entry; 260 leaves room for the map's growth), and holds no more entries.
func TestLogin_ThrottleMemoryBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("fills a 100,000-entry table")
	}
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	nosleep := func(context.Context, time.Duration) error { return nil }
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	var th throttle
	name := strings.Repeat("n", MaxUserNameLen-6)
	full := 0
	for i := range LoginThrottleEntries/3 + 100 {
		a, err := th.begin(context.Background(), clock, nosleep, fmt.Sprintf("%s%06d", name, i),
			addressKey(fmt.Sprintf("2001:db8:%x:%x::1", i/65536, i%65536)))
		if err != nil {
			if protocol.ErrorCode(err) != protocol.CodeLoginThrottleFull {
				t.Fatal(err)
			}
			full++
			continue
		}
		a.end(now, attemptFailed)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	n := len(th.seen)
	if n > LoginThrottleEntries || full == 0 {
		t.Fatalf("%d entries, %d refused as full", n, full)
	}
	per := float64(after.HeapAlloc-before.HeapAlloc) / float64(n)
	t.Logf("%d entries, %.0f bytes each, %.1f MiB", n, per, float64(after.HeapAlloc-before.HeapAlloc)/(1<<20))
	if per > 260 {
		t.Fatalf("%.0f bytes an entry: more than the docs promise", per)
	}
	runtime.KeepAlive(&th)
}
