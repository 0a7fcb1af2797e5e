package clockcheck

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper/internal/harness/ntptest"
)

func TestNTPSourceSyncs(t *testing.T) {
	ntp := startNTP(t)
	ntp.SetOffset(5 * time.Second)
	ntp.SetRoot(4*time.Millisecond, 2*time.Millisecond)
	src := startSource(t, &NTPSource{}, ntp)
	ref, unc, synced, age := src.Now()
	if d := ref.Sub(time.Now().Add(5 * time.Second)).Abs(); d > 50*time.Millisecond {
		t.Errorf("ref off by %s", d)
	}
	// Root delay / 2 + root dispersion = 4 ms, plus the query's RTT / 2.
	if !synced || unc < 4*time.Millisecond || unc > 50*time.Millisecond || age < 0 || age > time.Second {
		t.Errorf("unc %s synced %v age %s", unc, synced, age)
	}
	if ntp.Requests() == 0 {
		t.Fatal("no query")
	}
}

func TestNTPSourceRefusesInvalidAnswers(t *testing.T) {
	cases := []struct {
		name string
		set  func(*ntptest.Server)
	}{
		{"kiss of death", func(s *ntptest.Server) { s.SetStratum(0) }},
		{"stratum 16", func(s *ntptest.Server) { s.SetStratum(16) }},
		{"leap alarm", func(s *ntptest.Server) { s.SetLeap(ntptest.LeapAlarm) }},
		{"dispersion", func(s *ntptest.Server) { s.SetRoot(0, 20*time.Second) }},
		{"silent", func(s *ntptest.Server) { s.SetSilent(true) }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ntp := startNTP(t)
			c.set(ntp)
			src := &NTPSource{Servers: []string{ntp.Addr()}, Timeout: 200 * time.Millisecond, Logger: quiet()}
			if err := src.Poll(t.Context()); err == nil {
				t.Fatal("accepted")
			}
			if _, _, synced, _ := src.Now(); synced {
				t.Fatal("synced")
			}
		})
	}
}

// TestNTPSourceKeepsBest: the sample with the lowest uncertainty wins, the one
// already held included.
func TestNTPSourceKeepsBest(t *testing.T) {
	poor, good := startNTP(t), startNTP(t)
	poor.SetRoot(0, 400*time.Millisecond)
	poor.SetOffset(30 * time.Millisecond) // within its own uncertainty
	src := &NTPSource{Servers: []string{poor.Addr(), good.Addr()}, Timeout: 300 * time.Millisecond, Logger: quiet()}
	if err := src.Poll(t.Context()); err != nil {
		t.Fatal(err)
	}
	ref, unc, _, _ := src.Now()
	if d := time.Since(ref).Abs(); d > 20*time.Millisecond || unc > 100*time.Millisecond {
		t.Fatalf("ref off by %s, unc %s: not the good server's", d, unc)
	}
	good.SetSilent(true)
	if err := src.Poll(t.Context()); err != nil { // the poor server still answers
		t.Fatal(err)
	}
	ref, unc, synced, _ := src.Now()
	if d := time.Since(ref).Abs(); d > 20*time.Millisecond || unc > 100*time.Millisecond || !synced {
		t.Fatalf("ref off by %s, unc %s: the held sample was dropped for a worse one", d, unc)
	}
}

func TestNTPSourceAgesOut(t *testing.T) {
	ntp := startNTP(t)
	src := &NTPSource{Servers: []string{ntp.Addr()}, MaxAge: 200 * time.Millisecond, DriftPPM: 500, Logger: quiet()}
	if err := src.Poll(t.Context()); err != nil {
		t.Fatal(err)
	}
	_, unc0, synced, _ := src.Now()
	if !synced {
		t.Fatal("not synced")
	}
	time.Sleep(250 * time.Millisecond)
	ref, unc, synced, age := src.Now()
	if synced || age < 250*time.Millisecond {
		t.Fatalf("synced %v at age %s", synced, age)
	}
	// The reference runs on: the monotonic clock since the sample.
	if d := time.Since(ref).Abs(); d > 20*time.Millisecond {
		t.Fatalf("ref off by %s", d)
	}
	// 500 ppm of 250 ms: the uncertainty grew by at least 125 µs.
	if unc-unc0 < 125*time.Microsecond {
		t.Fatalf("uncertainty %s → %s", unc0, unc)
	}
}

// syncBuffer is a log destination safe for the source's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

func TestNTPSourceWarnsOfDisagreement(t *testing.T) {
	a, b := startNTP(t), startNTP(t)
	b.SetOffset(10 * time.Second)
	var logs syncBuffer
	src := &NTPSource{Servers: []string{a.Addr(), b.Addr()}, Logger: slog.New(slog.NewTextHandler(&logs, nil))}
	if err := src.Poll(t.Context()); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "NTP servers disagree") {
		t.Fatalf("log: %s", logs.String())
	}
}

func TestNTPSourceLifecycle(t *testing.T) {
	if err := (&NTPSource{}).Start(t.Context()); err == nil {
		t.Fatal("started without servers")
	}
	ntp := startNTP(t)
	ntp.SetSilent(true)
	var logs syncBuffer
	src := &NTPSource{Servers: []string{ntp.Addr()}, PollInterval: 20 * time.Millisecond, Timeout: 50 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))}
	if err := src.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	if err := src.Start(t.Context()); err == nil {
		t.Fatal("started twice")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	if err := src.Wait(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait on a silent server: %v", err)
	}
	ntp.SetSilent(false)
	ctx2, cancel2 := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel2()
	if err := src.Wait(ctx2); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the synced log line", func() bool { return strings.Contains(logs.String(), "NTP source synced") })
	_ = src.Close()
	_ = src.Close()
}
