package main

import (
	"context"
	"errors"
	"io"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper/clockcheck"
)

// TestClockAgentAllowList runs the real binary with the allow-list 127.0.0.1/32
// from the environment: a source off the list (127.0.0.2) is closed at once,
// unanswered, even with a valid request; the replica at 127.0.0.1 is answered;
// the stop line counts the stranger as denied.
func TestClockAgentAllowList(t *testing.T) {
	ntp := startTestNTP(t)
	secretFile := writeClockSecret(t, clockAgentSecret+"\n", 0o600)
	cmd, logs, addr := startBinary(t, "clock agent listening", []string{"IDKEEPER_ALLOW=127.0.0.1/32"},
		"clock-agent", "--listen", "127.0.0.1:0", "--secret-file", secretFile, "--ntp-server", ntp.Addr(), "--log-format", "json")
	if !strings.Contains(logs.String(), `"allow":"127.0.0.1/32"`) {
		t.Errorf("the listening line does not name the allow-list:\n%s", logs)
	}
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, _ = c.Write(clockcheck.NewRequest().AppendLine(nil))
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	start := time.Now()
	b, err := io.ReadAll(c)
	if len(b) != 0 || (err != nil && !strings.Contains(err.Error(), "reset")) || time.Since(start) > time.Second {
		t.Fatalf("a stranger got %q, %v after %s", b, err, time.Since(start))
	}
	if _, err := (&clockcheck.Verifier{Addr: addr, Secret: []byte(clockAgentSecret)}).Sample(t.Context()); err != nil {
		t.Fatalf("the allowed source: %v\n%s", err, logs)
	}
	stopBinary(t, cmd, logs)
	waitLog(t, logs, "clock agent stopped")
	if s := logs.String(); !strings.Contains(s, `"answered":1`) || !strings.Contains(s, `"denied":1`) {
		t.Fatalf("stop line:\n%s", s)
	}
}

// TestClockAgentWideListenNeedsAllow: the real command refuses, with status 2
// and a message naming --allow, a --listen address beyond loopback without an
// allow-list, before it queries NTP or listens.
func TestClockAgentWideListenNeedsAllow(t *testing.T) {
	secretFile := writeClockSecret(t, clockAgentSecret+"\n", 0o600)
	for _, listen := range []string{"0.0.0.0:0", ":0", "[::]:0", "10.0.0.5:4123", "agent.internal:4123"} {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		out, err := exec.CommandContext(ctx, binary, "clock-agent", "--listen", listen, "--secret-file", secretFile, "--ntp-server", "127.0.0.1:1").CombinedOutput()
		cancel()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != exitUsage || !strings.Contains(string(out), "--allow") {
			t.Errorf("--listen %s without --allow: %v\n%s", listen, err, out)
		}
	}
}

func TestClockAgentAllowSettings(t *testing.T) {
	good := writeClockSecret(t, clockAgentSecret+"\n", 0o600)
	base := func(extra ...string) []string {
		return append([]string{"clock-agent", "--secret-file", good, "--ntp-server", "127.0.0.1:1"}, extra...)
	}
	for _, c := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{base("--listen", "0.0.0.0:1", "--allow", "10.0.0.0/33"), nil, "allow"},
		{base("--listen", "0.0.0.0:1", "--allow", ""), nil, "allow"},
		{base("--listen", "0.0.0.0:1"), map[string]string{"IDKEEPER_ALLOW": "not-an-ip"}, "IDKEEPER_ALLOW"},
		{base("--listen", "127.0.0.1:1", "--max-conns-per-source", "0"), nil, "max-conns-per-source"},
		{base("--listen", "127.0.0.1:1", "--max-conns", "4", "--max-conns-per-source", "5"), nil, "max-conns-per-source"},
		{base("--listen", "127.0.0.1:1", "--read-timeout", "1ms"), nil, "read-timeout"},
	} {
		code, _, stderr := runInProcess(t.Context(), c.args, c.env)
		if code != exitUsage || !strings.Contains(stderr, c.want) {
			t.Errorf("%v %v: exit %d, want 2 and %q:\n%s", c.args, c.env, code, c.want, stderr)
		}
	}

	var f clockAgentFlags
	fs := newFlagSet("clock-agent", io.Discard)
	f.register(fs)
	env := map[string]string{"IDKEEPER_SECRET_FILE": good, "IDKEEPER_NTP_SERVER": "x"}
	if err := parseFlags(fs, []string{"--listen", "0.0.0.0:1", "--allow", "10.1.0.0/16,fd00::/8", "--allow", "192.0.2.7"},
		func(k string) (string, bool) { v, ok := env[k]; return v, ok }); err != nil {
		t.Fatal(err)
	}
	cfg, err := f.config(io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if got := (prefixesFlag{&cfg.Allow}).String(); got != "10.1.0.0/16,fd00::/8,192.0.2.7/32" {
		t.Fatalf("allow %s", got)
	}
	if cfg.MaxPerSource != clockcheck.DefaultMaxConnsPerSource || cfg.ReadTimeout != clockcheck.DefaultReadTimeout {
		t.Fatalf("defaults %+v", cfg)
	}
	for _, h := range []string{"localhost", "127.0.0.1", "127.1.2.3", "::1", "::ffff:127.0.0.1"} {
		if !loopbackHost(h) {
			t.Errorf("%s is loopback", h)
		}
	}
}
