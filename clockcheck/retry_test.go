package clockcheck

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"
)

// refusingAddr is a loopback address nothing listens on: a dial is refused.
func refusingAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// countingDial dials bad for the first failures attempts, then the
// Verifier's address; it counts the dials.
func countingDial(bad string, failures int64, dials *atomic.Int64) func(context.Context, string, string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if dials.Add(1) <= failures {
			addr = bad
		}
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}
}

// TestSampleRetriesRefusedDial: a refused first attempt (the agent restarting)
// is retried within the sample's deadline, and the sample is good.
func TestSampleRetriesRefusedDial(t *testing.T) {
	_, addr := startAgent(t, &Agent{Source: fixedSource{synced: true}})
	var dials atomic.Int64
	v := &Verifier{Addr: addr, Secret: testSecret, Timeout: 2 * time.Second, Dial: countingDial(refusingAddr(t), 2, &dials)}
	s, err := v.Sample(t.Context())
	if err != nil {
		t.Fatalf("a sample after two refused attempts: %v", err)
	}
	if dials.Load() != 3 || s.Attempts != 3 {
		t.Fatalf("%d dials, %d attempts; want 3", dials.Load(), s.Attempts)
	}
}

// TestSampleRetriesEarlyClose: an agent that closes before answering (over a
// limit, or restarting) is an I/O failure, retried.
func TestSampleRetriesEarlyClose(t *testing.T) {
	_, addr := startAgent(t, &Agent{Source: fixedSource{synced: true}})
	closer, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer closer.Close()
	go func() {
		for {
			c, err := closer.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	var dials atomic.Int64
	v := &Verifier{Addr: addr, Secret: testSecret, Timeout: 2 * time.Second, Dial: countingDial(closer.Addr().String(), 1, &dials)}
	if s, err := v.Sample(t.Context()); err != nil || s.Attempts != 2 {
		t.Fatalf("%v, %d attempts", err, s.Attempts)
	}
}

// TestSampleVerdictNotRetried: a wrong MAC is the verdict on the sample: one
// attempt, and a monitor latches at once.
func TestSampleVerdictNotRetried(t *testing.T) {
	r := newRig(t, nil)
	var dials atomic.Int64
	r.v.Timeout = 2 * time.Second
	r.v.Dial = countingDial("", 0, &dials)
	r.proxy.set(flipMAC)
	start := time.Now()
	if _, err := r.v.Sample(t.Context()); ReasonOf(err) != ReasonMAC || dials.Load() != 1 {
		t.Fatalf("%v after %d dials", err, dials.Load())
	}
	m, err := NewMonitor(r.v, MonitorConfig{Delta: time.Second, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if err := m.Start(t.Context()); ReasonOf(err) != ReasonMAC || !m.Status().Latched || dials.Load() != 2 {
		t.Fatalf("Start: %v, %d dials", err, dials.Load())
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("a bad MAC took %s to judge: retried?", took)
	}
}

// TestSampleIOUntilDeadline: I/O failures until the deadline fail the sample
// with ReasonIO, within Timeout, and latch the monitor.
func TestSampleIOUntilDeadline(t *testing.T) {
	var dials atomic.Int64
	bad := refusingAddr(t)
	v := &Verifier{Addr: bad, Secret: testSecret, Timeout: 400 * time.Millisecond, RetryPause: 20 * time.Millisecond,
		Dial: countingDial("", 0, &dials)}
	start := time.Now()
	_, err := v.Sample(t.Context())
	took := time.Since(start)
	if ReasonOf(err) != ReasonIO || dials.Load() < 3 {
		t.Fatalf("%v after %d dials", err, dials.Load())
	}
	if took > 400*time.Millisecond+200*time.Millisecond {
		t.Fatalf("the sample took %s, over its 400 ms deadline", took)
	}
	m, err := NewMonitor(v, MonitorConfig{Delta: time.Second, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if err := m.Start(t.Context()); ReasonOf(err) != ReasonIO || !m.Status().Latched {
		t.Fatalf("Start: %v", err)
	}
}

// TestMonitorRoundRetries: a monitor whose agent refuses one attempt mid-run
// stays healthy: the round's sample retries.
func TestMonitorRoundRetries(t *testing.T) {
	_, addr := startAgent(t, &Agent{Source: fixedSource{synced: true}})
	var dials, refuse atomic.Int64
	bad := refusingAddr(t)
	v := &Verifier{Addr: addr, Secret: testSecret, Timeout: time.Second,
		Dial: func(ctx context.Context, network, a string) (net.Conn, error) {
			dials.Add(1)
			if refuse.CompareAndSwap(1, 0) {
				a = bad
			}
			return (&net.Dialer{}).DialContext(ctx, network, a)
		}}
	var rounds atomic.Int64
	m, err := NewMonitor(v, MonitorConfig{Delta: 10 * time.Second, Interval: 20 * time.Millisecond, Logger: quiet(),
		Observe: func(Round) { rounds.Add(1) }})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	refuse.Store(1)
	eventually(t, "the refused attempt", func() bool { return refuse.Load() == 0 })
	n := rounds.Load()
	eventually(t, "two more rounds", func() bool { return rounds.Load() >= n+2 })
	if st := m.Status(); st.Latched || !st.Healthy {
		t.Fatalf("%+v", st)
	}
}
