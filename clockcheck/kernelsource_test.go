package clockcheck

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeKernel is a KernelSource.Read whose reading the test sets; the machine's
// clock is never touched.
type fakeKernel struct {
	mu    sync.Mutex
	r     KernelReading
	err   error
	reads int
}

func (k *fakeKernel) set(r KernelReading, err error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.r, k.err = r, err
}

func (k *fakeKernel) read() (KernelReading, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.reads++
	return k.r, k.err
}

// staNano is STA_NANO (0x2000), set by chrony: a flag that does not matter.
const staNano = 0x2000

// chronySynced is a reading of a kernel that chrony disciplines, synced.
var chronySynced = KernelReading{State: 0, Status: staNano, MaxError: 20 * time.Millisecond, EstError: 300 * time.Microsecond}

// kernelAgent serves a KernelSource reading k over TCKCLK 2 on loopback and
// returns a Verifier of it.
func kernelAgent(t *testing.T, src *KernelSource) *Verifier {
	t.Helper()
	_, addr := startAgent(t, &Agent{Source: src})
	return testVerifier(addr)
}

// unsynced asserts that a sample of v fails with ReasonUnsynced.
func unsynced(t *testing.T, v *Verifier) {
	t.Helper()
	s, err := v.Sample(t.Context())
	var f *Failure
	if !errors.As(err, &f) || f.Reason != ReasonUnsynced {
		t.Fatalf("sample %v, err %v: want the agent to answer synced=0", s, err)
	}
}

// TestKernelSourceVouches: a synced kernel reading is answered synced=1 with
// the kernel's maximum error (plus its growth) as the uncertainty, checked by a
// real Verifier over TCKCLK 2.
func TestKernelSourceVouches(t *testing.T) {
	k := &fakeKernel{r: chronySynced}
	src := &KernelSource{Read: k.read, Logger: quiet()}
	if err := src.Poll(); err != nil {
		t.Fatal(err)
	}
	s, err := kernelAgent(t, src).Sample(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	// 20 ms + 500 µs + the growth since the reading, rounded up to whole ms
	// after the 0.5 ms of rounding.
	if s.Uncertainty < 21*time.Millisecond || s.Uncertainty > 22*time.Millisecond {
		t.Errorf("uncertainty %s, want 21ms or 22ms", s.Uncertainty)
	}
	if s.Offset.Abs() > 50*time.Millisecond || s.SourceAge > time.Second {
		t.Errorf("offset %s, source age %s", s.Offset, s.SourceAge)
	}
}

// TestKernelSourceRefuses: TIME_ERROR, STA_UNSYNC, an unknown state, a
// maximum error over the bound (the default 16 s, or a MaxError set) or
// negative are answered synced=0, with the reason returned by Poll.
func TestKernelSourceRefuses(t *testing.T) {
	cases := []struct {
		name     string
		r        KernelReading
		maxError time.Duration
		reason   string
	}{
		{"TIME_ERROR", KernelReading{State: KernelTimeError, MaxError: time.Millisecond}, 0, "TIME_ERROR"},
		{"STA_UNSYNC", KernelReading{State: 0, Status: KernelStatusUnsync | staNano, MaxError: time.Millisecond}, 0, "STA_UNSYNC"},
		{"unknown state", KernelReading{State: 6, MaxError: time.Millisecond}, 0, "unknown clock state 6"},
		{"over 16 s", KernelReading{MaxError: 16 * time.Second}, 0, "over the bound 16s"},
		{"over MaxError", KernelReading{MaxError: 200 * time.Millisecond}, 100 * time.Millisecond, "over the bound 100ms"},
		{"negative", KernelReading{MaxError: -time.Microsecond}, 0, "negative"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			k := &fakeKernel{r: c.r}
			src := &KernelSource{Read: k.read, MaxError: c.maxError, Logger: quiet()}
			if err := src.Poll(); err == nil || !strings.Contains(err.Error(), c.reason) {
				t.Fatalf("Poll: %v, want %q", err, c.reason)
			}
			if _, _, synced, _ := src.Now(); synced {
				t.Fatal("synced")
			}
			unsynced(t, kernelAgent(t, src))
		})
	}
}

// TestKernelSourceStopsVouching: a running source that reads the kernel turn
// unsynchronised answers synced=0 from its next reading on (one PollInterval),
// and vouches again within min(PollInterval, 4 s) of the kernel's recovery.
func TestKernelSourceStopsVouching(t *testing.T) {
	k := &fakeKernel{r: chronySynced}
	src := &KernelSource{Read: k.read, PollInterval: 30 * time.Millisecond, Logger: quiet()}
	if err := src.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = src.Close() })
	if err := src.Wait(t.Context()); err != nil {
		t.Fatal(err)
	}
	v := kernelAgent(t, src)
	if _, err := v.Sample(t.Context()); err != nil {
		t.Fatal(err)
	}
	k.set(KernelReading{State: KernelTimeError, Status: KernelStatusUnsync, MaxError: 16 * time.Second}, nil)
	lost := time.Now()
	eventually(t, "synced=0", func() bool { _, _, synced, _ := src.Now(); return !synced })
	if d := time.Since(lost); d > 30*time.Millisecond+time.Second {
		t.Errorf("vouched for %s after the kernel lost sync, poll interval 30ms", d)
	}
	unsynced(t, v)
	k.set(chronySynced, nil)
	eventually(t, "synced again", func() bool { _, _, synced, _ := src.Now(); return synced })
	if _, err := v.Sample(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// TestKernelSourceReadFails: a failing adjtimex refuses at once, even after a
// reading that vouched, and logs the reason; a read that works again vouches.
func TestKernelSourceReadFails(t *testing.T) {
	var logs syncBuffer
	k := &fakeKernel{r: chronySynced}
	src := &KernelSource{Read: k.read, Logger: slog.New(slog.NewTextHandler(&logs, nil))}
	if err := src.Poll(); err != nil {
		t.Fatal(err)
	}
	v := kernelAgent(t, src)
	if _, err := v.Sample(t.Context()); err != nil {
		t.Fatal(err)
	}
	k.set(KernelReading{}, errors.New("adjtimex: operation not permitted"))
	if err := src.Poll(); err == nil || !strings.Contains(err.Error(), "operation not permitted") {
		t.Fatalf("Poll: %v", err)
	}
	unsynced(t, v)
	if l := logs.String(); !strings.Contains(l, "level=WARN") || !strings.Contains(l, "cannot read the kernel's clock state: adjtimex: operation not permitted") {
		t.Fatalf("log: %s", l)
	}
	_ = src.Poll() // the same failure is not logged twice
	if n := strings.Count(logs.String(), "operation not permitted"); n != 1 {
		t.Errorf("the failure logged %d times", n)
	}
	k.set(chronySynced, nil)
	if err := src.Poll(); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(logs.String(), "kernel clock source synced"); n != 2 {
		t.Errorf("synced logged %d times, want 2:\n%s", n, logs.String())
	}
	if _, err := v.Sample(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// TestKernelSourceAges: between readings the uncertainty grows as the kernel's
// maxerror does (500 ppm), the reference follows the monotonic clock, and the
// source stops vouching past MaxAge or once the growth reaches MaxError.
func TestKernelSourceAges(t *testing.T) {
	var shift time.Duration
	base := time.Now() // with its monotonic reading: the source's ages are exact
	clock := func() time.Time { return base.Add(shift) }
	k := &fakeKernel{r: KernelReading{MaxError: 10 * time.Millisecond}}
	src := &KernelSource{Read: k.read, MaxAge: time.Minute, MaxError: 30 * time.Millisecond, Logger: quiet(), clock: clock}
	if err := src.Poll(); err != nil {
		t.Fatal(err)
	}
	shift = 10 * time.Second
	ref, unc, synced, age := src.Now()
	// 10 ms + 500 µs + 500 ppm × 10 s.
	if want := 15500 * time.Microsecond; !synced || unc != want || age != 10*time.Second {
		t.Fatalf("synced %v, unc %s (want %s), age %s", synced, unc, want, age)
	}
	if want := base.Round(0).Add(10 * time.Second); !ref.Equal(want) {
		t.Errorf("ref %s, want %s", ref, want)
	}
	shift = 40 * time.Second // 10 ms + 500 µs + 20 ms > 30 ms
	if _, unc, synced, _ := src.Now(); synced {
		t.Errorf("synced at uncertainty %s over MaxError 30ms", unc)
	}
	src.MaxError = time.Hour
	shift = 61 * time.Second
	if _, _, synced, age := src.Now(); synced {
		t.Errorf("synced at age %s over MaxAge 1m", age)
	}
}

func TestKernelSourceLifecycle(t *testing.T) {
	k := &fakeKernel{r: KernelReading{Status: KernelStatusUnsync}}
	src := &KernelSource{Read: k.read, PollInterval: 10 * time.Millisecond, Logger: quiet()}
	if _, _, synced, _ := src.Now(); synced {
		t.Fatal("synced before any reading")
	}
	if err := src.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	if err := src.Start(t.Context()); err == nil {
		t.Fatal("started twice")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	if err := src.Wait(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait on an unsynced kernel: %v", err)
	}
	k.set(chronySynced, nil)
	ctx2, cancel2 := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel2()
	if err := src.Wait(ctx2); err != nil {
		t.Fatal(err)
	}
	_ = src.Close()
	k.mu.Lock()
	n := k.reads
	k.mu.Unlock()
	time.Sleep(30 * time.Millisecond)
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.reads != n {
		t.Errorf("read %d times after Close", k.reads-n)
	}
	_ = src.Close()
}
