package main

import (
	"context"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper/clockcheck"
)

// startAgentCommand runs `idkeeper clock-agent` in process on loopback, fed by a
// test NTP server, with the extra flags, and returns its address once it listens.
func startAgentCommand(t *testing.T, secretFile string, extra ...string) string {
	t.Helper()
	ntp := startTestNTP(t)
	ctx, stop := context.WithCancel(context.Background())
	var stderr lockedBuffer
	done := make(chan int, 1)
	args := append([]string{"clock-agent", "--listen", "127.0.0.1:0", "--secret-file", secretFile, "--ntp-server", ntp.Addr(),
		"--log-format", "json"}, extra...)
	go func() {
		done <- run(ctx, args, func(string) (string, bool) { return "", false }, &lockedBuffer{}, &stderr)
	}()
	t.Cleanup(func() {
		stop()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			t.Errorf("the clock agent did not stop:\n%s", stderr.String())
		}
	})
	return logAddr(t, &stderr, "clock agent listening")
}

// unsyncedSource is a time source that has lost its sync: a real agent serving
// it answers synced=0.
type unsyncedSource struct{}

func (unsyncedSource) Now() (time.Time, time.Duration, bool, time.Duration) {
	return time.Now(), time.Millisecond, false, time.Hour
}

// TestProbeClockAgent: `idkeeper probe tckclk://…` is healthy (0) only on an
// authentic synced=1 answer of a real agent: an agent answering synced=0, one
// under another secret, one that does not serve the probe's source address (the
// allow-list, which Compose opens to 127.0.0.1 for this check) and a port where
// nothing listens are unhealthy (1), each with its reason.
func TestProbeClockAgent(t *testing.T) {
	secretFile := writeClockSecret(t, clockAgentSecret+"\n", 0o600)
	addr := startAgentCommand(t, secretFile)
	code, out, errOut := probe(t, "--secret-file", secretFile, "tckclk://"+addr)
	if code != exitOK || !strings.Contains(out, "tckclk://"+addr+": synced, offset") {
		t.Fatalf("a synced agent: exit %d, stdout %q, stderr %q", code, out, errOut)
	}

	wrong := writeClockSecret(t, strings.ToUpper(clockAgentSecret), 0o600)
	if code, out, errOut := probe(t, "--secret-file", wrong, "tckclk://"+addr); code != exitFail || !strings.Contains(errOut, "(mac)") {
		t.Errorf("another secret: exit %d, stdout %q, stderr %q; want 1 and the MAC failure", code, out, errOut)
	}

	// A real agent whose source lost its sync answers synced=0.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	agent := &clockcheck.Agent{Secret: []byte(clockAgentSecret), Source: unsyncedSource{}, Logger: slog.New(slog.DiscardHandler)}
	go func() { _ = agent.Serve(ln) }()
	t.Cleanup(func() { _ = agent.Close() })
	code, out, errOut = probe(t, "--secret-file", secretFile, "tckclk://"+ln.Addr().String())
	if code != exitFail || !strings.Contains(errOut, "synced=0") {
		t.Errorf("an unsynced agent: exit %d, stdout %q, stderr %q; want 1 and synced=0", code, out, errOut)
	}
	// The agent counts an answer after writing it: the probe may have read it and
	// exited first.
	for deadline := time.Now().Add(2 * time.Second); agent.Stats().Answered == 0 && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	if st := agent.Stats(); st.Answered != 1 {
		t.Errorf("the unsynced agent answered %d requests, want 1: the probe made no exchange", st.Answered)
	}

	// The agent as Compose runs it: --allow its network; the probe from loopback
	// is closed unanswered until 127.0.0.1/32 is allowed too.
	closed := startAgentCommand(t, secretFile, "--allow", "192.0.2.0/24")
	if code, _, errOut := probe(t, "--timeout", "300ms", "--secret-file", secretFile, "tckclk://"+closed); code != exitFail ||
		!strings.Contains(errOut, "(io)") && !strings.Contains(errOut, "(timeout)") {
		t.Errorf("an agent that does not serve loopback: exit %d, stderr %q; want 1", code, errOut)
	}
	open := startAgentCommand(t, secretFile, "--allow", "192.0.2.0/24", "--allow", "127.0.0.1/32")
	if code, out, errOut := probe(t, "--secret-file", secretFile, "tckclk://"+open); code != exitOK {
		t.Errorf("an agent that allows 127.0.0.1/32: exit %d, stdout %q, stderr %q", code, out, errOut)
	}

	// Nothing listening: a port that was just free.
	free, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := free.Addr().String()
	free.Close()
	began := time.Now()
	if code, _, errOut := probe(t, "--timeout", "300ms", "--secret-file", secretFile, "tckclk://"+gone); code != exitFail ||
		!strings.Contains(errOut, "refused") {
		t.Errorf("nothing listening: exit %d, stderr %q; want 1 and the refused connection", code, errOut)
	}
	if d := time.Since(began); d > 2*time.Second {
		t.Errorf("the probe of a closed port took %s, past its --timeout 300ms", d)
	}
}

// The command line of the tckclk probe: the secret file is required, for
// tckclk:// only, and must hold a usable secret; the URL is HOST:PORT only.
func TestProbeClockUsage(t *testing.T) {
	good := writeClockSecret(t, clockAgentSecret, 0o600)
	short := writeClockSecret(t, "short", 0o600)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"tckclk://127.0.0.1:4123"}, "--secret-file is required"},
		{[]string{"--secret-file", filepath.Join(t.TempDir(), "none"), "tckclk://127.0.0.1:4123"}, "no such file"},
		{[]string{"--secret-file", short, "tckclk://127.0.0.1:4123"}, "at least 32"},
		{[]string{"--secret-file", good, "tckclk://127.0.0.1"}, "want tckclk://HOST:PORT"},
		{[]string{"--secret-file", good, "tckclk://127.0.0.1:4123/x"}, "want tckclk://HOST:PORT"},
		{[]string{"--secret-file", good, "tcp://127.0.0.1:4123"}, "for tckclk:// URLs only"},
		{[]string{"--secret-file", good, "ftp://127.0.0.1:4123"}, "tckclk://"},
	} {
		if code, _, errOut := probe(t, c.args...); code != exitFail || !strings.Contains(errOut, c.want) {
			t.Errorf("probe %q: exit %d, stderr %q; want 1 and %q", c.args, code, errOut, c.want)
		}
	}
	if code, out, _ := probe(t, "-h"); code != exitOK || !strings.Contains(out, "tckclk://") || !strings.Contains(out, "--secret-file") {
		t.Errorf("probe -h: exit %d:\n%s", code, out)
	}
}
