package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/internal/harness/redistest"
	"github.com/idkeeper/idkeeper/server"
)

// serverProcess is the real binary serving as a registry replica, its JSON log
// scanned as it comes.
type serverProcess struct {
	t    *testing.T
	cmd  *exec.Cmd
	base string
	logs *lockedBuffer
	done chan struct{} // closed once the process has exited and its log is read
	code int           // the exit status, once done; -1 when a signal ended it
}

// startServerProcess starts `idkeeper server` with args (listening on a free
// loopback port, JSON logs) and waits until it logs its address. When the
// process exits first, base is empty and code holds its status.
func startServerProcess(t *testing.T, env []string, args ...string) *serverProcess {
	t.Helper()
	cmd := exec.Command(binary, append([]string{"server", "--listen", "127.0.0.1:0", "--log-format", "json"}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &serverProcess{t: t, cmd: cmd, logs: &lockedBuffer{}, done: make(chan struct{})}
	addr := make(chan string, 1)
	go func() {
		scanLogs(stderr, s.logs, addr)
		err := cmd.Wait()
		s.code = 0
		if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
			s.code = ee.ExitCode()
		}
		close(s.done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-s.done
	})
	select {
	case a := <-addr:
		s.base = "http://" + a
	case <-s.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("the server neither listened nor exited within 30 s:\n%s", s.logs)
	}
	return s
}

// wait waits up to d for the process to exit and returns its status; false when
// it still runs.
func (s *serverProcess) wait(d time.Duration) (int, bool) {
	select {
	case <-s.done:
		return s.code, true
	case <-time.After(d):
		return 0, false
	}
}

// ownedBy reports whether a job lock owner (the registry's default owner,
// host:pid:random) names the process pid.
func ownedBy(owner string, pid int) bool {
	parts := strings.Split(owner, ":")
	return len(parts) >= 3 && parts[len(parts)-2] == strconv.Itoa(pid)
}

// locksOf returns the names of the job locks pid holds in store.
func locksOf(t *testing.T, store idkeeper.Store, pid int) []string {
	t.Helper()
	locks, err := store.Locks(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range locks {
		if ownedBy(l.Owner, pid) {
			out = append(out, l.Name)
		}
	}
	return out
}

// readyzWatch asks url's /readyz every few milliseconds until stop, recording
// when each request that answered 200 was sent.
type readyzWatch struct {
	mu   sync.Mutex
	oks  []time.Time
	asks int
	stop chan struct{}
	done chan struct{}
}

func watchReadyz(url string) *readyzWatch {
	w := &readyzWatch{stop: make(chan struct{}), done: make(chan struct{})}
	hc := &http.Client{Timeout: 2 * time.Second}
	go func() {
		defer close(w.done)
		for {
			select {
			case <-w.stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
			sent := time.Now()
			resp, err := hc.Get(url + "/readyz")
			if err != nil {
				continue
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			w.mu.Lock()
			w.asks++
			if resp.StatusCode == http.StatusOK {
				w.oks = append(w.oks, sent)
			}
			w.mu.Unlock()
		}
	}()
	return w
}

// end stops the watch and returns when the requests that answered 200 were
// sent, and how many requests were answered in all.
func (w *readyzWatch) end() (oks []time.Time, asks int) {
	close(w.stop)
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.oks, w.asks
}

// logTime returns the time of the first JSON log line whose msg starts with
// prefix.
func logTime(t *testing.T, logs, prefix string) (time.Time, map[string]any) {
	t.Helper()
	sc := bufio.NewScanner(strings.NewReader(logs))
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		var rec map[string]any
		if json.Unmarshal(sc.Bytes(), &rec) != nil {
			continue
		}
		if msg, _ := rec["msg"].(string); strings.HasPrefix(msg, prefix) {
			at, err := time.Parse(time.RFC3339Nano, fmt.Sprint(rec["time"]))
			if err != nil {
				t.Fatalf("log line without a time: %v", rec)
			}
			return at, rec
		}
	}
	t.Fatalf("no log line %q:\n%s", prefix, logs)
	return time.Time{}, nil
}

// Issue #29 finding 1: a replica whose clock check latches recovers without a
// person. The real binary on Redis, with a clock agent: once the agent's
// reference moves 3 s away (Δ 1 s) the process stops granting, hands back its
// job locks (read in the store), and exits with status 75 by itself; /readyz
// answers 200 to no request sent after the latch. A supervisor's fresh process
// on the same state file and store refuses to start while the agent still does
// not vouch for its clock, and starts and turns ready once it does.
func TestServerClockLatchExits(t *testing.T) {
	agent := startClockAgent(t)
	rs := redistest.Start(t)
	initInProcess(t, rs.URL())
	state := filepath.Join(t.TempDir(), "registry-state")
	env := []string{ClockSecretEnv + "=" + clockSecretForTests, BootstrapKeyEnv + "=" + bootstrapKey}
	args := []string{"--store", rs.URL(), "--state-file", state, "--accept-lost-writes-on-redis-restart",
		"--clock-agent", agent.Addr, "--clock-delta", "1s", "--clock-check-interval", "100ms", "--cleanup-interval", "1s"}
	store, err := server.OpenStore(context.Background(), rs.URL(), server.StoreOptions{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()

	s := startServerProcess(t, env, args...)
	if s.base == "" {
		t.Fatalf("the server exited %d before listening:\n%s", s.code, s.logs)
	}
	pid := s.cmd.Process.Pid
	waitReady(t, s.base, 20*time.Second)
	c := &client{t: t, base: s.base, key: bootstrapKey}
	alloc := `{"requester":{"machineId":"m","pid":1,"startedAt":"2026-11-30T00:00:00Z","instance":"a"},"count":1}`
	c.do("POST", "/v1/leases", alloc, 200)
	// The cleanup job runs every second under its job lock, which names this
	// process's owner. A lock of that owner with a long hold stands for the
	// jobs that keep theirs long after a run (the audit retention job: 54 min).
	var owner string
	deadline := time.Now().Add(20 * time.Second)
	for owner == "" {
		locks, err := store.Locks(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range locks {
			if ownedBy(l.Owner, pid) {
				owner = l.Owner
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server holds no job lock 20 s after it started:\n%s", s.logs)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, ok, err := store.TryLock(context.Background(), "long-held-job", owner, time.Hour); !ok || err != nil {
		t.Fatalf("take a long-held lock for %s: %v %v", owner, ok, err)
	}
	if _, ok, err := store.TryLock(context.Background(), "another-replicas-job", "other-host:1:cafe", time.Hour); !ok || err != nil {
		t.Fatalf("take another replica's lock: %v %v", ok, err)
	}
	held := locksOf(t, store, pid)

	watch := watchReadyz(s.base)
	agent.NTP.SetOffset(3 * time.Second)
	code, exited := s.wait(30 * time.Second)
	oks, asks := watch.end()
	if !exited {
		t.Fatalf("the server still runs 30 s after its clock reference moved 3 s (Δ 1 s): a latched replica must exit "+
			"for its supervisor to restart it:\n%s", grepLines(s.logs.String(), "clock"))
	}
	logs := s.logs.String()
	if code != exitClockUnverified {
		t.Fatalf("exit status %d, want %d (exitClockUnverified):\n%s", code, exitClockUnverified, logs)
	}
	latchedAt, _ := logTime(t, logs, "clock check failed")
	for _, at := range oks {
		if at.After(latchedAt) {
			t.Errorf("/readyz answered 200 to a request sent at %s, after the latch at %s", at.Format(time.RFC3339Nano),
				latchedAt.Format(time.RFC3339Nano))
		}
	}
	if asks == 0 {
		t.Error("/readyz was never answered while the clock reference moved: the watch saw nothing")
	}
	_, exit := logTime(t, logs, "the clock check failed: this replica has stopped granting")
	if exit["level"] != "ERROR" || exit["reason"] != "bound" || exit["exitStatus"] != float64(exitClockUnverified) ||
		!strings.Contains(fmt.Sprint(exit["msg"]), "supervisor") {
		t.Errorf("the exit line: %v", exit)
	}
	t.Logf("/readyz answered %d requests while the reference moved; the exit line: %s", asks, exit["msg"])
	if !strings.Contains(logs, `"msg":"stopped"`) {
		t.Errorf("no graceful shutdown (no \"stopped\" line):\n%s", logs)
	}
	if still := locksOf(t, store, pid); len(still) > 0 {
		t.Errorf("the exited replica still holds the job locks %v (it held %v)", still, held)
	}
	if locks, err := store.Locks(context.Background()); err != nil || len(locks) == 0 || locks[0].Name != "another-replicas-job" {
		t.Errorf("another replica's lock went with this one's: %+v %v", locks, err)
	}

	// The supervisor starts a fresh process: while the agent still does not
	// vouch for its clock it does not start, let alone serve.
	refused := startServerProcess(t, env, args...)
	if refused.base != "" {
		t.Fatalf("a fresh process listens while the agent's reference is 3 s off:\n%s", refused.logs)
	}
	if refused.code != exitFail || !strings.Contains(refused.logs.String(), "does not vouch for this server's clock") {
		t.Fatalf("fresh process on a bad clock: exit %d:\n%s", refused.code, refused.logs)
	}
	// Once it does (its NTP source follows within a few polls), the supervisor's
	// next start serves.
	agent.NTP.SetOffset(0)
	var fresh *serverProcess
	for deadline := time.Now().Add(20 * time.Second); ; {
		fresh = startServerProcess(t, env, args...)
		if fresh.base != "" {
			break
		}
		if fresh.code != exitFail || !strings.Contains(fresh.logs.String(), "does not vouch") || time.Now().After(deadline) {
			t.Fatalf("the fresh process exited %d:\n%s", fresh.code, fresh.logs)
		}
		time.Sleep(200 * time.Millisecond) // the supervisor's RestartSec
	}
	waitReady(t, fresh.base, 20*time.Second)
	(&client{t: t, base: fresh.base, key: bootstrapKey}).do("POST", "/v1/leases", strings.Replace(alloc, `"a"`, `"b"`, 1), 200)
	if err := fresh.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code, ok := fresh.wait(30 * time.Second); !ok || code != exitOK {
		t.Fatalf("the fresh process on SIGTERM: exited %v, status %d:\n%s", ok, code, fresh.logs)
	}
}

// waitReady polls base's /readyz until it answers 200.
func waitReady(t *testing.T, base string, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		st, body := getBody(t, base+"/readyz")
		if st == http.StatusOK {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz %d after %v: %s", st, d, body)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
