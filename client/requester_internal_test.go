package client

import (
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestMachineIDOrder(t *testing.T) {
	dir := t.TempDir()
	etc, dbus, missing := filepath.Join(dir, "etc"), filepath.Join(dir, "dbus"), filepath.Join(dir, "none")
	host := func() (string, error) { return "host-1", nil }
	write := func(p, s string) {
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		name       string
		etc, dbus  string // "" leaves the file absent
		want       string
		hostFails  bool
		wantFailed bool
	}{
		{name: "etc first", etc: "aaaa\n", dbus: "bbbb\n", want: "aaaa"},
		{name: "dbus when etc is empty", etc: "\n", dbus: "bbbb\n", want: "bbbb"},
		{name: "dbus when etc is absent", dbus: "bbbb", want: "bbbb"},
		{name: "host name last", want: "host-1"},
		{name: "nothing at all", hostFails: true, wantFailed: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			os.Remove(etc)
			os.Remove(dbus)
			if c.etc != "" {
				write(etc, c.etc)
			}
			if c.dbus != "" {
				write(dbus, c.dbus)
			}
			h := host
			if c.hostFails {
				h = func() (string, error) { return "", errors.New("no host name") }
			}
			got, err := machineID([]string{missing, etc, dbus}, h)
			if (err != nil) != c.wantFailed || got != c.want {
				t.Fatalf("machineID = %q, %v; want %q (error %v)", got, err, c.want, c.wantFailed)
			}
		})
	}
}

func TestParseStart(t *testing.T) {
	// The command name holds spaces and a ')': fields are counted from the last ')'.
	stat := "4242 (my (odd) cmd) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 123456 1000 10 18446744073709551615"
	sys := "cpu  1 2 3\nintr 5\nbtime 1772366400\nprocesses 9\n"
	got, err := parseStart(stat, sys)
	want := time.Unix(1772366400, 0).Add(1234560 * time.Millisecond).UTC()
	if err != nil || !got.Equal(want) {
		t.Fatalf("parseStart = %v, %v; want %v", got, err, want)
	}
	if _, err := parseStart("1 (x) S 1", sys); err == nil {
		t.Error("a short stat line was accepted")
	}
	if _, err := parseStart(stat, "cpu 1\n"); err == nil {
		t.Error("a /proc/stat without btime was accepted")
	}
}

func TestProcessRequester(t *testing.T) {
	r, err := ProcessRequester()
	if err != nil {
		t.Fatal(err)
	}
	if r.PID != os.Getpid() || r.MachineID == "" || r.StartedAt.After(time.Now()) || r.StartedAt.Before(time.Now().Add(-24*time.Hour*365)) {
		t.Fatalf("ProcessRequester = %+v", r)
	}
	if r.StartedAt.Nanosecond()%int(time.Millisecond) != 0 {
		t.Errorf("start time %v is not whole milliseconds", r.StartedAt)
	}
	again, _ := ProcessRequester()
	if again != r {
		t.Error("the identity changed within the process")
	}
}

// The Alloc back-off of DESIGN §4 (3 s doubling to 60 s, ±20 % jitter) caps after
// the jitter (issue #30): no wait is ever over 60 s, and none below its documented
// lower bound. The draw is injected: both extremes of the jitter (0 and the largest
// float below 1), its middle, and many random draws, for every attempt up to long
// past the cap.
func TestBackoff(t *testing.T) {
	cfg, err := Config{ServerURL: "http://x", APIKey: "k"}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	var draw float64
	s := &Session{cfg: cfg, jitterDraw: func() float64 { return draw }}
	r := rand.New(rand.NewPCG(30, 30))
	bases := []float64{3, 6, 12, 24, 48, 60, 60, 60}
	for attempt := range 80 {
		base := 60.0
		if attempt < len(bases) {
			base = bases[attempt]
		}
		lo, hi := base*0.8, min(60, base*1.2)
		draws := []float64{0, math.Nextafter(1, 0), 0.5}
		for range 2000 {
			draws = append(draws, r.Float64())
		}
		var seenLo, seenHi float64 = 61, 0
		for _, draw = range draws {
			d := s.backoff(attempt)
			if d > time.Minute {
				t.Fatalf("backoff(%d) with draw %v = %v: over the 60 s cap", attempt, draw, d)
			}
			if sec := d.Seconds(); sec < lo-1e-9 || sec > hi+1e-9 {
				t.Fatalf("backoff(%d) with draw %v = %v, want %v..%v s", attempt, draw, d, lo, hi)
			}
			seenLo, seenHi = min(seenLo, d.Seconds()), max(seenHi, d.Seconds())
		}
		// The extremes are reached: the jitter is still there at the cap.
		if math.Abs(seenLo-lo) > 1e-6 || math.Abs(seenHi-hi) > 1e-6 {
			t.Fatalf("backoff(%d) spans %v..%v s, want %v..%v", attempt, seenLo, seenHi, lo, hi)
		}
	}
	// The library's own draw stays within the bounds too.
	s.jitterDraw = nil
	for range 2000 {
		if d := s.backoff(9); d < 48*time.Second || d > time.Minute {
			t.Fatalf("backoff(9) = %v, want 48..60 s", d)
		}
	}
	cfg.BackoffJitter = 0
	s = &Session{cfg: cfg}
	if d := s.backoff(10); d != time.Minute {
		t.Errorf("backoff without jitter at the cap = %v", d)
	}
	if d := s.backoff(1 << 20); d != time.Minute {
		t.Errorf("backoff(2^20) = %v, want the cap", d)
	}
}
