package main

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper/clockcheck"
	"github.com/idkeeper/idkeeper/internal/harness/ntptest"
)

const clockAgentSecret = "clock-agent-test-secret-0123456789abcdef"

func writeClockSecret(t *testing.T, content string, mode os.FileMode) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "clock.secret")
	if err := os.WriteFile(file, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(file, mode); err != nil { // past the umask
		t.Fatal(err)
	}
	return file
}

func startTestNTP(t *testing.T) *ntptest.Server {
	t.Helper()
	s, err := ntptest.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// logAddr waits for the JSON log line whose message is msg and returns its addr.
func logAddr(t *testing.T, logs *lockedBuffer, msg string) string {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		sc := bufio.NewScanner(strings.NewReader(logs.String()))
		for sc.Scan() {
			var rec struct{ Msg, Addr string }
			if json.Unmarshal(sc.Bytes(), &rec) == nil && rec.Msg == msg {
				return rec.Addr
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no %q in the log:\n%s", msg, logs)
	return ""
}

// TestClockAgentInProcess runs the command in process against a test SNTP
// responder (named in the environment), samples it with a Verifier, and stops it
// the way SIGTERM does.
func TestClockAgentInProcess(t *testing.T) {
	ntp := startTestNTP(t)
	ntp.SetOffset(2 * time.Second)
	secretFile := writeClockSecret(t, clockAgentSecret+"\n", 0o600)
	ctx, stop := context.WithCancel(t.Context())
	defer stop()
	var stdout, stderr lockedBuffer
	env := map[string]string{"IDKEEPER_NTP_SERVER": ntp.Addr()}
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"clock-agent", "--listen", "127.0.0.1:0", "--secret-file", secretFile, "--log-format", "json"},
			func(k string) (string, bool) { v, ok := env[k]; return v, ok }, &stdout, &stderr)
	}()
	addr := logAddr(t, &stderr, "clock agent listening")

	v := &clockcheck.Verifier{Addr: addr, Secret: []byte(clockAgentSecret)}
	s, err := v.Sample(t.Context())
	if err != nil {
		t.Fatalf("sample: %v\n%s", err, stderr.String())
	}
	// The agent answers with its NTP server's time, 2 s ahead of this clock.
	if d := (s.Offset - 2*time.Second).Abs(); d > 100*time.Millisecond || s.Uncertainty > 100*time.Millisecond {
		t.Fatalf("sample %s", s)
	}
	// A verifier with another secret rejects the answer.
	other := &clockcheck.Verifier{Addr: addr, Secret: []byte(strings.ToUpper(clockAgentSecret))}
	if _, err := other.Sample(t.Context()); clockcheck.ReasonOf(err) != clockcheck.ReasonMAC {
		t.Fatalf("wrong secret: %v", err)
	}
	if strings.Contains(stderr.String(), "readable by its group") {
		t.Fatalf("warned of a 0600 file:\n%s", stderr.String())
	}

	stop()
	select {
	case code := <-done:
		if code != exitOK {
			t.Fatalf("exit %d:\n%s", code, stderr.String())
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("did not stop:\n%s", stderr.String())
	}
	if !strings.Contains(stderr.String(), `"msg":"clock agent stopped","answered":2`) {
		t.Fatalf("no stop line:\n%s", stderr.String())
	}
}

// TestClockAgentWaitsForNTP: the agent does not listen before a valid NTP
// sample, and stops cleanly while it waits; a secret file others may read is
// warned of.
func TestClockAgentWaitsForNTP(t *testing.T) {
	ntp := startTestNTP(t)
	ntp.SetLeap(ntptest.LeapAlarm) // unsynchronised: no valid sample
	secretFile := writeClockSecret(t, clockAgentSecret, 0o644)
	ctx, stop := context.WithCancel(t.Context())
	defer stop()
	var stderr lockedBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"clock-agent", "--listen", "127.0.0.1:0", "--secret-file", secretFile, "--ntp-server", ntp.Addr(),
			"--log-format", "json"}, func(string) (string, bool) { return "", false }, &lockedBuffer{}, &stderr)
	}()
	waitLog(t, &stderr, "waiting for a first valid NTP sample")
	waitLog(t, &stderr, "NTP query failed")
	if !strings.Contains(stderr.String(), "readable by its group or others") {
		t.Fatalf("no warning of a 0644 secret file:\n%s", stderr.String())
	}
	if strings.Contains(stderr.String(), "clock agent listening") {
		t.Fatalf("listening without a valid sample:\n%s", stderr.String())
	}
	stop()
	select {
	case code := <-done:
		if code != exitOK {
			t.Fatalf("exit %d:\n%s", code, stderr.String())
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("did not stop:\n%s", stderr.String())
	}
}

func TestClockAgentRefusesBadSettings(t *testing.T) {
	good := writeClockSecret(t, clockAgentSecret+"\n", 0o600)
	short := writeClockSecret(t, strings.Repeat("s", clockcheck.MinSecretLen-1)+"\n", 0o600)
	base := func(extra ...string) []string {
		return append([]string{"clock-agent", "--listen", "127.0.0.1:0", "--secret-file", good, "--ntp-server", "127.0.0.1:1"}, extra...)
	}
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"clock-agent", "--secret-file", good, "--ntp-server", "x"}, "--listen HOST:PORT is required"},
		{[]string{"clock-agent", "--listen", ":1", "--ntp-server", "x"}, "--secret-file is required"},
		{[]string{"clock-agent", "--listen", ":1", "--secret-file", good}, "--ntp-server is required"},
		{base("--secret-file", short), "at least 32"},
		{base("--secret-file", filepath.Join(t.TempDir(), "missing")), "--secret-file"},
		{base("--listen", "nohostport"), "want HOST:PORT"},
		{base("--poll-interval", "10ms"), "poll-interval"},
		{base("--max-sample-age", "30s"), "max-sample-age"}, // not over the 64 s poll interval
		{base("--max-conns", "0"), "max-conns"},
		{base("--timeout", "0s"), "timeout"},
		{base("--ntp-server", ""), "empty server name"},
	}
	for _, c := range cases {
		code, _, stderr := runInProcess(t.Context(), c.args, nil)
		if code != exitUsage || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d, want 2 and %q:\n%s", c.args, code, c.want, stderr)
		}
	}
	code, _, stderr := runInProcess(t.Context(), []string{"clock-agent", "-h"}, nil)
	if code != exitOK || !strings.Contains(stderr, "IDKEEPER_NTP_SERVER") || !strings.Contains(stderr, "--secret-file") {
		t.Fatalf("clock-agent -h: exit %d:\n%s", code, stderr)
	}
}

// TestClockAgentBinary runs the real binary and stops it with SIGTERM.
func TestClockAgentBinary(t *testing.T) {
	ntp := startTestNTP(t)
	secretFile := writeClockSecret(t, clockAgentSecret+"\n", 0o600)
	cmd, logs, addr := startBinary(t, "clock agent listening", nil,
		"clock-agent", "--listen", "127.0.0.1:0", "--secret-file", secretFile, "--ntp-server", ntp.Addr(), "--log-format", "json")
	s, err := (&clockcheck.Verifier{Addr: addr, Secret: []byte(clockAgentSecret)}).Sample(t.Context())
	if err != nil || s.Offset.Abs() > 100*time.Millisecond {
		t.Fatalf("sample %v: %v\n%s", s, err, logs)
	}
	stopBinary(t, cmd, logs)
	waitLog(t, logs, "clock agent stopped")
}
