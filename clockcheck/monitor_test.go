package clockcheck

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fixedSource is a TimeSource for the tests that are not about NTP: this
// machine's clock shifted by offset.
type fixedSource struct {
	offset, unc, age time.Duration
	synced           bool
}

func (s fixedSource) Now() (time.Time, time.Duration, bool, time.Duration) {
	return time.Now().Add(s.offset), s.unc, s.synced, s.age
}

// fastVerifier is a Verifier of a healthy agent that answers from a fixedSource.
func fastVerifier(t *testing.T) *Verifier {
	t.Helper()
	_, addr := startAgent(t, &Agent{Source: fixedSource{unc: time.Millisecond, synced: true, age: time.Second}})
	return &Verifier{Addr: addr, Secret: testSecret, Timeout: 100 * time.Millisecond}
}

func TestCheckDelta(t *testing.T) {
	for d, ok := range map[time.Duration]bool{
		0: false, time.Millisecond: false, 2*time.Millisecond - 1: false, 2 * time.Millisecond: true,
		time.Second: true, 60 * time.Second: true, 60*time.Second + 1: false, -time.Second: false,
	} {
		if err := CheckDelta(d); (err == nil) != ok {
			t.Errorf("CheckDelta(%s) = %v", d, err)
		}
	}
}

func TestNewMonitorChecksConfig(t *testing.T) {
	v := &Verifier{Addr: "127.0.0.1:1", Secret: testSecret}
	bad := []struct {
		v   *Verifier
		cfg MonitorConfig
	}{
		{nil, MonitorConfig{Delta: time.Second}},
		{&Verifier{Secret: testSecret}, MonitorConfig{Delta: time.Second}},
		{&Verifier{Addr: "x:1", Secret: testSecret[:31]}, MonitorConfig{Delta: time.Second}},
		{v, MonitorConfig{}},
		{v, MonitorConfig{Delta: time.Millisecond}},
		{v, MonitorConfig{Delta: 61 * time.Second}},
		{v, MonitorConfig{Delta: time.Second, Interval: -1}},
		{v, MonitorConfig{Delta: time.Second, MaxNoGood: 8 * time.Second}}, // < 5 s + 2 × 2 s
	}
	for i, c := range bad {
		if _, err := NewMonitor(c.v, c.cfg); err == nil {
			t.Errorf("case %d: accepted", i)
		}
	}
	m, err := NewMonitor(v, MonitorConfig{Delta: 2 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if m.cfg.Interval != 5*time.Second || m.cfg.MaxNoGood != 30*time.Second || m.Delta() != 2*time.Millisecond {
		t.Fatalf("defaults %+v", m.cfg)
	}
	if f := m.Err(); ReasonOf(f) != ReasonNoGoodSample || m.Status().Latched {
		t.Fatalf("before Start: %v", f)
	}
	m.Close() // before Start: a no-op
}

func TestStepTolerance(t *testing.T) {
	m := &Monitor{cfg: MonitorConfig{Delta: time.Second}}
	mono := time.Now()
	wall := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	m.last = Sample{At: wall, mono: mono}
	later := mono.Add(10 * time.Second)
	cases := []struct {
		wallEl time.Duration
		want   Reason
	}{
		{10 * time.Second, ""},
		{10*time.Second - 5*time.Millisecond, ""},         // slewing at 500 ppm
		{10*time.Second - 6*time.Millisecond, ""},         // plus the 1 ms tolerance
		{10*time.Second - 7*time.Millisecond, ReasonStep}, // faster: a step back
		{-time.Second, ReasonStep},                        // a step back past the last sample
		{11 * time.Second, ""},                            // ahead by Δ
		{11*time.Second + time.Millisecond, ReasonStep},   // ahead by more
		{10*time.Second + 500*time.Millisecond, ""},       // ahead, within Δ
		{10*time.Second - 1100*time.Millisecond, ReasonStep},
	}
	for _, c := range cases {
		f := m.stepLocked(wall.Add(c.wallEl), later, 0)
		if got := ReasonOf(f); got != c.want {
			t.Errorf("wall %s in 10s: %v", c.wallEl, f)
		}
	}
}

// storeClock is a MonitorConfig.Store whose offset and error the test sets.
type storeClock struct {
	mu     sync.Mutex
	offset time.Duration
	err    error
	calls  int
	slow   time.Duration // the next read takes this long (once)
}

func (s *storeClock) read(context.Context) (time.Time, time.Duration, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	if d := s.slow; d > 0 {
		s.slow = 0
		time.Sleep(d)
		return time.Now().Add(s.offset), d, s.err
	}
	return time.Now().Add(s.offset), 100 * time.Microsecond, s.err
}

func (s *storeClock) slowOnce(d time.Duration) {
	s.mu.Lock()
	s.slow = d
	s.mu.Unlock()
}

func (s *storeClock) set(offset time.Duration, err error) {
	s.mu.Lock()
	s.offset, s.err = offset, err
	s.mu.Unlock()
}

func TestMonitorStoreClock(t *testing.T) {
	const delta = 100 * time.Millisecond
	var rounds []Round
	var mu sync.Mutex
	store := &storeClock{err: errors.New("store down")}
	m, err := NewMonitor(fastVerifier(t), MonitorConfig{Delta: delta, Interval: 20 * time.Millisecond, MaxNoGood: 5 * time.Second,
		Store: store.read, Logger: quiet(), Observe: func(r Round) { mu.Lock(); rounds = append(rounds, r); mu.Unlock() }})
	if err != nil {
		t.Fatal(err)
	}
	// The agent alone decides Start: the store is checked after.
	if err := m.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	eventually(t, "a store read error", func() bool { return ReasonOf(m.Err()) == ReasonIO })
	if st := m.Status(); st.Latched || st.Healthy || !strings.Contains(st.Err.Error(), "store down") {
		t.Fatalf("store down: %+v", st)
	}
	store.set(10*time.Millisecond, nil)
	eventually(t, "healthy", m.Healthy)
	st := m.Status()
	if st.StoreBound < 10*time.Millisecond || st.StoreBound > delta/2 || st.GoodRounds == 0 {
		t.Fatalf("store bound %+v", st)
	}
	// A read error again is not a clock failure: unhealthy until a read succeeds.
	store.set(0, errors.New("failover"))
	eventually(t, "a store read error", func() bool { return ReasonOf(m.Err()) == ReasonIO })
	store.set(0, nil)
	eventually(t, "healthy", m.Healthy)
	// A store clock beyond Δ/2 latches.
	store.set(delta*6/10, nil)
	<-m.Failed()
	if f := m.Status().Err; f.Reason != ReasonBound || !strings.Contains(f.Error(), "store clock") {
		t.Fatal(f)
	}
	store.set(0, nil)
	time.Sleep(100 * time.Millisecond)
	if m.Healthy() {
		t.Fatal("healthy again")
	}
	m.Close()
	mu.Lock()
	defer mu.Unlock()
	var storeErrs, checked int
	for _, r := range rounds {
		switch {
		case r.Err != nil && r.Err.Reason == ReasonIO:
			if r.Latched {
				t.Errorf("a store read error latched: %+v", r)
			}
			storeErrs++
		case r.StoreChecked && r.Err == nil:
			checked++
		}
	}
	if last := rounds[len(rounds)-1]; storeErrs < 2 || checked < 2 || !last.Latched || last.Err.Reason != ReasonBound || !last.StoreChecked {
		t.Fatalf("%d store errors, %d good checks, last %+v", storeErrs, checked, last)
	}
}

// TestMonitorSlowStoreRead: a store read that takes longer than Δ/2 (a Redis
// failing over answers after 0.6–0.8 s) cannot bound the store's clock, but it
// is no evidence against it either: the monitor is unhealthy for that round
// and healthy again after the next good read, never latched. A store clock off
// by more than the slow read can explain still latches.
func TestMonitorSlowStoreRead(t *testing.T) {
	const delta = 200 * time.Millisecond
	var mu sync.Mutex
	var slowRounds []Round
	store := &storeClock{}
	m, err := NewMonitor(fastVerifier(t), MonitorConfig{Delta: delta, Interval: 20 * time.Millisecond, MaxNoGood: 5 * time.Second,
		Store: store.read, Logger: quiet(), Observe: func(r Round) {
			if r.Err != nil {
				mu.Lock()
				slowRounds = append(slowRounds, r)
				mu.Unlock()
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	eventually(t, "healthy", m.Healthy)
	store.slowOnce(3 * delta)
	eventually(t, "a slow read seen", func() bool { mu.Lock(); defer mu.Unlock(); return len(slowRounds) > 0 })
	eventually(t, "healthy after the slow read", m.Healthy)
	mu.Lock()
	r := slowRounds[0]
	mu.Unlock()
	if r.Latched || r.Err.Reason != ReasonIO || !r.Err.Transient() || !strings.Contains(r.Err.Error(), "too slow") {
		t.Fatalf("slow read round: %+v", r)
	}
	select {
	case <-m.Failed():
		t.Fatalf("latched on a slow read: %v", m.Err())
	default:
	}
	// A slow read from a store whose clock is off by far more than the latency
	// explains is still a clock failure.
	store.set(3*delta, nil)
	store.slowOnce(delta)
	select {
	case <-m.Failed():
	case <-time.After(5 * time.Second):
		t.Fatal("a far-off store clock did not latch")
	}
	if f := m.Status().Err; f.Reason != ReasonBound || f.Transient() {
		t.Fatal(f)
	}
}

func TestMonitorStoreOutageTooLong(t *testing.T) {
	store := &storeClock{err: errors.New("store down")}
	m, err := NewMonitor(fastVerifier(t), MonitorConfig{Delta: time.Second, Interval: 20 * time.Millisecond, MaxNoGood: 300 * time.Millisecond,
		Store: store.read, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	select {
	case <-m.Failed():
	case <-time.After(5 * time.Second):
		t.Fatal("not failed")
	}
	if r := ReasonOf(m.Err()); r != ReasonNoGoodSample {
		t.Fatal(m.Err())
	}
}

// TestMonitorNoGoodSample: a monitor that stops sampling (a stalled process, here
// a closed one) fails once MaxNoGood is over, on the next read of its health.
func TestMonitorNoGoodSample(t *testing.T) {
	m, err := NewMonitor(fastVerifier(t), MonitorConfig{Delta: time.Second, Interval: 20 * time.Millisecond, MaxNoGood: 250 * time.Millisecond, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	m.Close()
	m.Close()
	if !m.Healthy() {
		t.Fatal(m.Err())
	}
	time.Sleep(300 * time.Millisecond)
	if r := ReasonOf(m.Err()); r != ReasonNoGoodSample || !m.Status().Latched {
		t.Fatal(m.Err())
	}
}

// TestMonitorConcurrentUse reads the monitor from many goroutines while it
// samples and then latches (run with -race).
func TestMonitorConcurrentUse(t *testing.T) {
	v := fastVerifier(t)
	clock := &shiftedClock{}
	v.Now = clock.Now
	var observed atomic.Int64
	var failed atomic.Int64
	m, err := NewMonitor(v, MonitorConfig{Delta: 50 * time.Millisecond, Interval: 5 * time.Millisecond, MaxNoGood: time.Second, Logger: quiet(),
		Observe: func(Round) { observed.Add(1) }, OnFail: func(*Failure) { failed.Add(1) }})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 8 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				_ = m.Err()
				_ = m.Status()
				_ = m.Last()
			}
		})
	}
	eventually(t, "rounds", func() bool {
		if f := m.Status(); f.Latched {
			t.Fatalf("latched early: %v", f.Err)
		}
		return observed.Load() >= 10
	})
	clock.Set(-20 * time.Millisecond)
	<-m.Failed()
	close(stop)
	wg.Wait()
	m.Close()
	if ReasonOf(m.Err()) != ReasonStep || failed.Load() != 1 {
		t.Fatalf("%v, OnFail %d times", m.Err(), failed.Load())
	}
	if st := m.Status(); st.Rounds < 10 || st.GoodRounds < 10 || st.Last.RTT == 0 {
		t.Fatalf("%+v", st)
	}
}

// TestMonitorCloseIsNoVerdict: closing a monitor mid-exchange latches nothing.
func TestMonitorCloseIsNoVerdict(t *testing.T) {
	r := newRig(t, nil)
	m, err := NewMonitor(r.v, MonitorConfig{Delta: time.Second, Interval: 10 * time.Millisecond, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	r.proxy.set(silent)
	time.Sleep(50 * time.Millisecond) // a round is now waiting for its answer
	m.Close()
	if st := m.Status(); st.Latched {
		t.Fatalf("closing latched %v", st.Err)
	}
}
