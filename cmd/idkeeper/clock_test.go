package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper/clockcheck/clockchecktest"
	"github.com/idkeeper/idkeeper/internal/harness/redistest"
)

const clockSecretForTests = "clock-secret-for-the-cmd-tests-0123456789"

func startClockAgent(t *testing.T) *clockchecktest.Agent {
	t.Helper()
	a, err := clockchecktest.Start([]byte(clockSecretForTests))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Close)
	return a
}

func getBody(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// A server with a clock agent is ready and says how its clock is checked; once
// the agent's reference moves beyond Δ/2 from the server's clock it fails
// closed for good: /readyz answers CLOCK_UNVERIFIED until the server, which
// never turns ready again, exits with exitClockUnverified (latch_test.go runs
// the real binary through it).
func TestServerClockAgent(t *testing.T) {
	agent := startClockAgent(t)
	// The secret file through the environment: IDKEEPER_CLOCK_SECRET_FILE is the
	// flag's variable, not a second source of the secret.
	secretFile := filepath.Join(t.TempDir(), "clock.secret")
	writeFile(t, secretFile, clockSecretForTests+"\n")
	env := map[string]string{BootstrapKeyEnv: bootstrapKey, ClockSecretEnv + "_FILE": secretFile}
	store := "bolt:" + filepath.Join(t.TempDir(), "idk.db")
	initInProcess(t, store)
	s, code := startInProcess(t, []string{"--store", store, "--clock-agent", agent.Addr, "--clock-delta", "1s",
		"--clock-check-interval", "100ms"}, env)
	if s == nil || s.base == "" {
		t.Fatalf("server exited %d", code)
	}
	st, body := getBody(t, s.base+"/readyz")
	if st != 200 || !strings.Contains(body, `"clock":"verified by the clock agent `+agent.Addr) {
		t.Fatalf("/readyz %d %s", st, body)
	}
	c := s.client(bootstrapKey)
	alloc := `{"requester":{"machineId":"m","pid":1,"startedAt":"2026-11-30T00:00:00Z","instance":"a"},"count":1}`
	c.do("POST", "/v1/leases", alloc, 200)
	if _, m := getBody(t, s.base+"/metrics"); !strings.Contains(m, "idkeeper_clock_verified 1") {
		t.Fatalf("metrics: %s", grepLines(m, "idkeeper_clock"))
	}

	agent.NTP.SetOffset(3 * time.Second)
	deadline := time.Now().Add(15 * time.Second)
	hc := &http.Client{Timeout: 2 * time.Second}
	for {
		// The failure is logged once latched: a request sent after the line must
		// not find the server ready.
		latched := strings.Contains(s.logs.String(), "clock check failed")
		resp, err := hc.Get(s.base + "/readyz")
		if err != nil {
			break // it has stopped listening: on its way out
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == 200 && latched {
			t.Fatalf("/readyz 200 after the clock check failed: %s", b)
		}
		if resp.StatusCode != 200 && !strings.Contains(string(b), `"code":"CLOCK_UNVERIFIED"`) {
			t.Fatalf("/readyz %d: %s", resp.StatusCode, b)
		}
		if resp.StatusCode != 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("still ready 15 s after the reference moved 3 s: %s", b)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Stopping it now changes nothing: a latched server exits with its own status.
	if code := s.stop(); code != exitClockUnverified {
		t.Fatalf("exit status %d, want %d:\n%s", code, exitClockUnverified, s.logs)
	}
	for _, want := range []string{"the clock check failed", `"reason":"bound"`, `"exitStatus":75`} {
		if !strings.Contains(s.logs.String(), want) {
			t.Errorf("the log lacks %s:\n%s", want, s.logs.String())
		}
	}
}

// A server whose agent does not answer does not start: agent healthy, then
// listeners.
func TestServerClockAgentDownRefusesStart(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	store := "bolt:" + filepath.Join(t.TempDir(), "idk.db")
	initInProcess(t, store)
	code, _, stderr := runInProcess(context.Background(), []string{"server", "--listen", "127.0.0.1:0", "--store", store,
		"--clock-agent", addr}, map[string]string{ClockSecretEnv: clockSecretForTests})
	if code != exitFail || !strings.Contains(stderr, "does not vouch for this server's clock") {
		t.Fatalf("exit %d: %s", code, stderr)
	}
}

// The clock flags are checked before anything starts; a shared store needs an
// agent or the explicit unsafe flag.
func TestClockFlagsChecked(t *testing.T) {
	rs := redistest.Start(t)
	short := filepath.Join(t.TempDir(), "short")
	writeFile(t, short, "too short")
	// A store URL in a file is judged as the store, not as the default it replaces.
	storeFile := filepath.Join(t.TempDir(), "store")
	writeFile(t, storeFile, rs.URL())
	for _, c := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"--store", rs.URL()}, nil, "is shared by replicas: give --clock-agent HOST:PORT"},
		{[]string{"--store-file", storeFile}, nil, "is shared by replicas: give --clock-agent HOST:PORT"},
		{nil, map[string]string{"IDKEEPER_STORE_FILE": storeFile}, "is shared by replicas: give --clock-agent HOST:PORT"},
		// Issue #32: PostgreSQL is a shared store (nothing need answer there: the flags are checked first).
		{[]string{"--store", "postgres://idkeeper@127.0.0.1:1/idk"}, nil, "is shared by replicas: give --clock-agent HOST:PORT"},
		{[]string{"--store", "postgresql://idkeeper@127.0.0.1:1/idk"}, nil, "is shared by replicas: give --clock-agent HOST:PORT"},
		{[]string{"--clock-agent", "127.0.0.1:1", "--unsafe-no-clock-agent"}, nil, "contradict each other"},
		{[]string{"--clock-secret-file", short}, nil, "--clock-secret-file needs --clock-agent"},
		{[]string{"--clock-agent", "127.0.0.1:1"}, nil, "--clock-agent needs its secret"},
		{[]string{"--clock-agent", "127.0.0.1:1", "--clock-secret-file", short}, nil, "--clock-secret-file:"},
		{[]string{"--clock-agent", "127.0.0.1:1"}, map[string]string{ClockSecretEnv: "short"}, "must hold at least 32 bytes"},
		{[]string{"--clock-agent", "127.0.0.1:1", "--clock-delta", "1ms"}, map[string]string{ClockSecretEnv: clockSecretForTests},
			"clock-delta = 1ms is outside its range 2ms..1m0s"},
		{[]string{"--clock-agent", "127.0.0.1:1", "--clock-delta", "61s"}, map[string]string{ClockSecretEnv: clockSecretForTests},
			"clock-delta = 1m1s is outside its range 2ms..1m0s"},
		{[]string{"--clock-agent", "127.0.0.1:1", "--clock-check-interval", "10ms"}, map[string]string{ClockSecretEnv: clockSecretForTests},
			"clock-check-interval = 10ms is outside its range 100ms..1m0s"},
	} {
		args := append([]string{"server", "--listen", "127.0.0.1:0"}, c.args...)
		if !strings.Contains(strings.Join(c.args, " "), "--store") && c.env["IDKEEPER_STORE_FILE"] == "" {
			args = append(args, "--store", "bolt:"+filepath.Join(t.TempDir(), "idk.db"))
		}
		code, _, stderr := runInProcess(context.Background(), args, c.env)
		if code != exitUsage || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 and %q", c.args, code, stderr, c.want)
		}
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}
