package main

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper/clockcheck"
)

// kernelReadings is a clock agent's readKernel whose reading the test sets.
type kernelReadings struct {
	mu sync.Mutex
	r  clockcheck.KernelReading
}

func (k *kernelReadings) set(r clockcheck.KernelReading) { k.mu.Lock(); k.r = r; k.mu.Unlock() }
func (k *kernelReadings) read() (clockcheck.KernelReading, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.r, nil
}

var (
	kernelSynced   = clockcheck.KernelReading{State: 0, MaxError: 30 * time.Millisecond}
	kernelUnsynced = clockcheck.KernelReading{State: clockcheck.KernelTimeError, Status: clockcheck.KernelStatusUnsync, MaxError: 16 * time.Second}
)

// TestClockAgentKernelSource runs the agent with --source kernel, chosen in the
// environment as Compose or systemd would: the environment's NTP servers are
// ignored with a warning; the agent does not listen while the kernel is
// unsynchronised, listens and vouches once it is synced, and answers synced=0
// from the next reading (--poll-interval 1s) after the kernel loses sync.
func TestClockAgentKernelSource(t *testing.T) {
	secretFile := writeClockSecret(t, clockAgentSecret+"\n", 0o600)
	env := map[string]string{"IDKEEPER_SOURCE": "kernel", "IDKEEPER_NTP_SERVER": "pool.invalid"}
	var logs lockedBuffer
	cfg, err := clockAgentSettings([]string{"--listen", "127.0.0.1:0", "--secret-file", secretFile, "--poll-interval", "1s", "--log-format", "json"},
		func(k string) (string, bool) { v, ok := env[k]; return v, ok }, &logs)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Source != sourceKernel || cfg.NTPServers != nil || !strings.Contains(logs.String(), "--source kernel ignores IDKEEPER_NTP_SERVER") {
		t.Fatalf("source %q, NTP servers %q:\n%s", cfg.Source, cfg.NTPServers, logs.String())
	}
	k := &kernelReadings{r: kernelUnsynced}
	cfg.readKernel = k.read
	ctx, stop := context.WithCancel(t.Context())
	defer stop()
	done := make(chan error, 1)
	go func() { done <- serveClockAgent(ctx, cfg) }()
	waitLog(t, &logs, "waiting for the kernel clock to be synced")
	waitLog(t, &logs, "the kernel reports TIME_ERROR")
	if strings.Contains(logs.String(), "clock agent listening") {
		t.Fatalf("listening on an unsynchronised kernel:\n%s", logs.String())
	}

	k.set(kernelSynced)
	addr := logAddr(t, &logs, "clock agent listening")
	v := &clockcheck.Verifier{Addr: addr, Secret: []byte(clockAgentSecret)}
	s, err := v.Sample(t.Context())
	if err != nil {
		t.Fatalf("sample: %v\n%s", err, logs.String())
	}
	if s.Uncertainty < 30*time.Millisecond || s.Uncertainty > 40*time.Millisecond || s.Offset.Abs() > 100*time.Millisecond {
		t.Fatalf("sample %s", s)
	}

	k.set(kernelUnsynced)
	deadline := time.Now().Add(3 * time.Second) // one 1 s poll interval, and slack for a loaded machine
	for {
		_, err := v.Sample(t.Context())
		if clockcheck.ReasonOf(err) == clockcheck.ReasonUnsynced {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("still vouching 3s after the kernel lost sync: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestClockAgentSourceSettings: --source takes ntp or kernel (from the command
// line or IDKEEPER_SOURCE) and names both otherwise; --ntp-server on the
// command line contradicts --source kernel; the help lists --source.
func TestClockAgentSourceSettings(t *testing.T) {
	good := writeClockSecret(t, clockAgentSecret+"\n", 0o600)
	base := []string{"clock-agent", "--listen", "127.0.0.1:0", "--secret-file", good}
	cases := []struct {
		args []string
		env  map[string]string
		want string
	}{
		{append(base, "--source", "gps"), nil, `invalid value "gps" for --source: want one of ntp, kernel`},
		{base, map[string]string{"IDKEEPER_SOURCE": "chrony"}, "IDKEEPER_SOURCE: want one of ntp, kernel"},
		{append(base, "--source", "kernel", "--ntp-server", "ntp1.internal"), nil, "--ntp-server is for --source ntp"},
		{base, map[string]string{"IDKEEPER_SOURCE": "kernel", "IDKEEPER_NTP_SERVER": "x"}, ""}, // checked below: no usage error
		{append(base, "--source", "ntp"), nil, "--ntp-server is required (repeatable) with --source ntp"},
	}
	for _, c := range cases {
		if c.want == "" {
			continue
		}
		code, _, stderr := runInProcess(t.Context(), c.args, c.env)
		if code != exitUsage || !strings.Contains(stderr, c.want) {
			t.Errorf("%v %v: exit %d, want 2 and %q:\n%s", c.args, c.env, code, c.want, stderr)
		}
	}
	for _, args := range [][]string{{"--source", "KERNEL"}, {"--source", "kernel", "--ntp-timeout", "1s"}} {
		cfg, err := clockAgentSettings(append(base[1:], args...), func(string) (string, bool) { return "", false }, &lockedBuffer{})
		if err != nil || cfg.Source != sourceKernel {
			t.Errorf("%v: source %q, %v", args, cfg.Source, err)
		}
	}
	cfg, err := clockAgentSettings(base[1:], func(k string) (string, bool) {
		return map[string]string{"IDKEEPER_NTP_SERVER": "x"}[k], k == "IDKEEPER_NTP_SERVER"
	},
		&lockedBuffer{})
	if err != nil || cfg.Source != sourceNTP || len(cfg.NTPServers) != 1 {
		t.Errorf("default source: %q %q, %v", cfg.Source, cfg.NTPServers, err)
	}
	code, _, stderr := runInProcess(t.Context(), []string{"clock-agent", "-h"}, nil)
	if code != exitOK || !strings.Contains(stderr, "--source  [IDKEEPER_SOURCE] (default ntp)") || !strings.Contains(stderr, "STA_UNSYNC") {
		t.Fatalf("clock-agent -h: exit %d:\n%s", code, stderr)
	}
}

// TestClockAgentKernelThisMachine runs --source kernel on this machine's real
// kernel (adjtimex, read-only): the agent listens if and only if the kernel is
// synced, and says why when it is not.
func TestClockAgentKernelThisMachine(t *testing.T) {
	r, err := clockcheck.ReadKernelClock()
	if errors.Is(err, clockcheck.ErrKernelClockUnsupported) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	synced := (&clockcheck.KernelSource{Logger: slog.New(slog.DiscardHandler)}).Poll() == nil
	t.Logf("this machine's kernel: %+v, synced %v", r, synced)
	secretFile := writeClockSecret(t, clockAgentSecret+"\n", 0o600)
	ctx, stop := context.WithCancel(t.Context())
	defer stop()
	var stderr lockedBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"clock-agent", "--source", "kernel", "--listen", "127.0.0.1:0", "--secret-file", secretFile, "--log-format", "json"},
			func(string) (string, bool) { return "", false }, &lockedBuffer{}, &stderr)
	}()
	if synced {
		addr := logAddr(t, &stderr, "clock agent listening")
		if _, err := (&clockcheck.Verifier{Addr: addr, Secret: []byte(clockAgentSecret)}).Sample(t.Context()); err != nil {
			t.Fatalf("sample: %v", err)
		}
	} else {
		waitLog(t, &stderr, "kernel clock source not synced")
		if strings.Contains(stderr.String(), "clock agent listening") {
			t.Fatalf("listening on an unsynchronised kernel:\n%s", stderr.String())
		}
	}
	stop()
	if code := <-done; code != exitOK {
		t.Fatalf("exit %d:\n%s", code, stderr.String())
	}
}
