package clockcheck

import (
	"sync"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper/internal/harness/ntptest"
)

// rig is the whole path on loopback: an SNTP responder feeding an NTPSource,
// an Agent answering from it, a proxy in front of the agent that misbehaves on
// demand, and a Verifier with a shiftable wall clock.
type rig struct {
	ntp   *ntptest.Server
	src   *NTPSource
	agent *Agent
	proxy *proxy
	clock *shiftedClock
	v     *Verifier
}

func newRig(t *testing.T, setup func(*NTPSource, *Verifier)) *rig {
	t.Helper()
	r := &rig{ntp: startNTP(t), src: &NTPSource{PollInterval: 50 * time.Millisecond}, clock: &shiftedClock{}}
	r.v = &Verifier{Secret: testSecret, Timeout: 300 * time.Millisecond, Now: r.clock.Now}
	if setup != nil {
		setup(r.src, r.v)
	}
	startSource(t, r.src, r.ntp)
	var addr string
	r.agent, addr = startAgent(t, &Agent{Source: r.src})
	r.proxy = startProxy(t, addr)
	r.v.Addr = r.proxy.Addr()
	return r
}

func TestVerifierHappyPath(t *testing.T) {
	r := newRig(t, nil)
	s, err := r.v.Sample(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if s.Offset.Abs() > 50*time.Millisecond || s.RTT <= 0 || s.RTT > 200*time.Millisecond {
		t.Errorf("sample %s", s)
	}
	// Root delay 1 ms / 2 + root dispersion 1 ms + NTP RTT / 2 + 0.5 ms rounding, in whole ms.
	if s.Uncertainty < 2*time.Millisecond || s.Uncertainty > 100*time.Millisecond {
		t.Errorf("uncertainty %s", s.Uncertainty)
	}
	if s.Bound != s.RTT+s.Uncertainty+s.Offset.Abs() {
		t.Errorf("bound %s ≠ RTT + uncertainty + |offset|: %s", s.Bound, s)
	}
	if s.SourceAge > time.Second || time.Since(s.At).Abs() > time.Second || s.At != s.At.Round(0) {
		t.Errorf("sample %s at %v", s, s.At)
	}
	if st := r.agent.Stats(); st.Answered != 1 {
		t.Errorf("agent stats %+v", st)
	}
}

// TestVerifierSeesSourceTime: the agent reports its NTP source's time, not its
// own clock, and the verifier measures the local clock against it.
func TestVerifierSeesSourceTime(t *testing.T) {
	ntp := startNTP(t)
	ntp.SetOffset(time.Hour)
	src := startSource(t, &NTPSource{}, ntp)
	_, addr := startAgent(t, &Agent{Source: src})
	s, err := (&Verifier{Addr: addr, Secret: testSecret}).Sample(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if d := (s.Offset - time.Hour).Abs(); d > 100*time.Millisecond {
		t.Fatalf("offset %s, want 1h", s.Offset)
	}
	if s.Bound < time.Hour {
		t.Fatalf("bound %s", s.Bound)
	}
}

func TestVerifierRefusesFarFuture(t *testing.T) {
	_, addr := startAgent(t, &Agent{Source: exactSource{ref: time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC), synced: true}})
	if _, err := (&Verifier{Addr: addr, Secret: testSecret}).Sample(t.Context()); ReasonOf(err) != ReasonBound {
		t.Fatal(err)
	}
}

func TestVerifierRefusesBadConfig(t *testing.T) {
	for _, v := range []*Verifier{{Secret: testSecret}, {Addr: "127.0.0.1:1", Secret: testSecret[:31]}} {
		if _, err := v.Sample(t.Context()); ReasonOf(err) != ReasonIO {
			t.Errorf("%+v: %v", v, err)
		}
	}
}

// TestMonitorFailsClosed runs each failure of DESIGN §8 against a healthy
// monitor: it must latch with the right reason, tell OnFail once, and stay
// failed when the fault goes away.
func TestMonitorFailsClosed(t *testing.T) {
	const delta = 2 * time.Second
	cases := []struct {
		name    string
		want    Reason
		setup   func(*NTPSource, *Verifier)
		breakIt func(*rig)
	}{
		{"mac flipped", ReasonMAC, nil, func(r *rig) { r.proxy.set(flipMAC) }},
		{"nonce mismatch", ReasonNonce, nil, func(r *rig) { r.proxy.set(otherNonce) }},
		{"replayed answer", ReasonNonce, nil, func(r *rig) { r.proxy.set(replay) }},
		{"oversized line", ReasonSize, nil, func(r *rig) { r.proxy.set(oversized) }},
		{"leading zeros", ReasonFormat, nil, func(r *rig) { r.proxy.set(leadingZeros) }},
		{"other version", ReasonVersion, nil, func(r *rig) { r.proxy.set(otherVersion) }},
		{"answer cut short", ReasonIO, nil, func(r *rig) { r.proxy.set(cutShort) }},
		{"agent unreachable", ReasonIO, nil, func(r *rig) { r.proxy.ln.Close() }},
		{"timeout", ReasonTimeout, nil, func(r *rig) { r.proxy.set(silent) }},
		{"synced=0", ReasonUnsynced,
			func(s *NTPSource, _ *Verifier) { s.MaxAge = 400 * time.Millisecond },
			func(r *rig) { r.ntp.SetLeap(ntptest.LeapAlarm) }},
		{"stale sample", ReasonStale,
			func(_ *NTPSource, v *Verifier) { v.MaxSourceAge = 400 * time.Millisecond },
			func(r *rig) { r.ntp.SetSilent(true) }},
		{"reference beyond Δ/2", ReasonBound, nil, func(r *rig) {
			// Lower root values make the new samples better than the one held.
			r.ntp.SetRoot(0, 0)
			r.ntp.SetOffset(delta*6/10 + 100*time.Millisecond)
		}},
		{"local clock offset beyond Δ/2", ReasonBound, nil, func(r *rig) { r.clock.Set(delta * 6 / 10) }},
		{"wall clock stepped back", ReasonStep, nil, func(r *rig) { r.clock.Set(-50 * time.Millisecond) }},
		{"wall clock jumped ahead", ReasonStep, nil, func(r *rig) { r.clock.Set(delta + 500*time.Millisecond) }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			r := newRig(t, c.setup)
			var mu sync.Mutex
			var told []*Failure
			m, err := NewMonitor(r.v, MonitorConfig{Delta: delta, Interval: 50 * time.Millisecond, MaxNoGood: 10 * time.Second, Logger: quiet(),
				OnFail: func(f *Failure) { mu.Lock(); told = append(told, f); mu.Unlock() }})
			if err != nil {
				t.Fatal(err)
			}
			if err := m.Start(t.Context()); err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			if !m.Healthy() || m.Last().Bound > delta/2 {
				t.Fatalf("not healthy at start: %v, %s", m.Err(), m.Last())
			}
			c.breakIt(r)
			select {
			case <-m.Failed():
			case <-time.After(10 * time.Second):
				t.Fatalf("still healthy: %s", m.Last())
			}
			t.Logf("latched: %v", m.Err())
			if got := ReasonOf(m.Err()); got != c.want {
				t.Fatalf("reason %q (%v), want %q", got, m.Err(), c.want)
			}
			eventually(t, "OnFail", func() bool { mu.Lock(); defer mu.Unlock(); return len(told) > 0 })

			// The fault goes away; the monitor stays failed, for the same reason.
			r.proxy.set(passThrough)
			r.clock.Set(0)
			r.ntp.SetOffset(0)
			r.ntp.SetLeap(ntptest.LeapNone)
			r.ntp.SetSilent(false)
			time.Sleep(300 * time.Millisecond)
			st := m.Status()
			if st.Healthy || !st.Latched || st.Err.Reason != c.want || m.Healthy() {
				t.Fatalf("after the fault: %+v", st)
			}
			m.Close()
			mu.Lock()
			defer mu.Unlock()
			if len(told) != 1 || told[0].Reason != c.want {
				t.Fatalf("OnFail told %v", told)
			}
		})
	}
}

// TestStartFailsClosed: a first sample that fails makes Start return the
// failure, and the monitor is latched before anything listens.
func TestStartFailsClosed(t *testing.T) {
	r := newRig(t, nil)
	r.proxy.set(silent)
	told := make(chan *Failure, 2)
	m, err := NewMonitor(r.v, MonitorConfig{Delta: time.Second, Logger: quiet(), OnFail: func(f *Failure) { told <- f }})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	err = m.Start(t.Context())
	if ReasonOf(err) != ReasonTimeout || ReasonOf(m.Err()) != ReasonTimeout || m.Healthy() {
		t.Fatalf("Start: %v; Err: %v", err, m.Err())
	}
	if f := <-told; f.Reason != ReasonTimeout {
		t.Fatal(f)
	}
	r.proxy.set(passThrough)
	if m.Healthy() {
		t.Fatal("healthy again")
	}
	if err := m.Start(t.Context()); err == nil {
		t.Fatal("started twice")
	}
}
