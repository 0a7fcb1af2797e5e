package chaos

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// The replicas' clock agents (issue #13, DESIGN §8): each replica of a cluster
// proves its clock against a TCKCLK 2 agent of its own, run in the harness's
// process and fed by a test NTP server, so that a scenario can move one
// replica's reference time away from its clock.

// Clock check settings of the replicas: Δ well above what loopback and a loaded
// machine add to a bound, and a check often enough to fail a replica quickly.
const (
	ClockDelta    = time.Second
	clockInterval = 200 * time.Millisecond
	// logClockFailed is what a replica logs when its clock check fails.
	logClockFailed = "the clock check failed: this registry grants"
)

// ExitClockUnverified is the exit status of a replica whose clock check failed
// while it served (docs/clock.md): it hands back its job locks and exits, and its
// supervisor starts a fresh process (issue #29).
const ExitClockUnverified = 75

// latchExitBound is how long a replica may take from its failed clock check to
// its exit: a drain of at most 5 s (2 s here, --shutdown-timeout), then its
// jobs, the locks and the store, on a loaded machine.
const latchExitBound = 20 * time.Second

// PropClockExit is the replicas' property of issue #29: a replica process whose
// clock check failed exits with ExitClockUnverified (and with no other status),
// unless the harness killed it first; no process exits with it otherwise.
const PropClockExit = "7 a replica whose clock check failed exits with status 75, and only such a replica"

// judgeClockExits checks PropClockExit on every replica process of the run,
// each judged on its own lines of its replica's log, and counts rep.ClockExits.
// It runs once every process has ended.
func (c *Cluster) judgeClockExits(rep *Report) {
	c.mu.Lock()
	servers := append([]*serverProc(nil), c.servers...)
	c.mu.Unlock()
	for _, s := range servers {
		log, err := os.ReadFile(filepath.Join(c.dir, s.name+".log"))
		if err != nil {
			rep.violate(PropClockExit, "%s: read its log: %v", s.name, err)
			continue
		}
		for i, p := range s.runs {
			end := int64(len(log))
			if i+1 < len(s.runs) {
				end = min(end, s.runs[i+1].logStart)
			}
			latched := p.logStart <= end && bytes.Contains(log[p.logStart:end], []byte(logClockFailed))
			code, killed, exited := p.exitStatus()
			switch {
			case !exited:
				rep.violate(PropClockExit, "%s (pid %d) still runs after the run", s.name, p.PID())
			case code == ExitClockUnverified:
				rep.ClockExits++
				if !latched {
					rep.violate(PropClockExit, "%s (pid %d) exited with status %d without a failed clock check", s.name, p.PID(), code)
				}
			case latched && !killed:
				rep.violate(PropClockExit, "%s (pid %d) failed its clock check and exited with status %d, want %d",
					s.name, p.PID(), code, ExitClockUnverified)
			}
		}
	}
}

// AwaitLatchExit waits, after its clock check failed, for server i's process to
// exit by itself within latchExitBound, polling /readyz meanwhile: it returns an
// error when the replica answers 200 once it has answered CLOCK_UNVERIFIED, when
// it does not exit in time, or when it exits with a status other than
// ExitClockUnverified.
func (c *Cluster) AwaitLatchExit(ctx context.Context, i int) error {
	c.mu.Lock()
	s := c.servers[i]
	p := s.p
	c.mu.Unlock()
	url := "http://127.0.0.1:" + fmt.Sprint(s.port) + "/readyz"
	deadline := time.Now().Add(latchExitBound)
	unverified := false
	for !p.exited() {
		ok, body := readyz(ctx, url)
		switch {
		case ok && unverified:
			return fmt.Errorf("%s turned ready again after its clock check failed: %s", s.name, body)
		case strings.Contains(body, "CLOCK_UNVERIFIED"):
			unverified = true
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("%s still runs %v after its clock check began to fail: a latched replica must exit", s.name, latchExitBound)
		}
		sleepCtx(ctx, 20*time.Millisecond)
	}
	if code, _, _ := p.exitStatus(); code != ExitClockUnverified {
		return fmt.Errorf("%s exited with status %d after its clock check failed, want %d (see %s)", s.name, code, ExitClockUnverified,
			p.log.Name())
	}
	return nil
}

// RestartServer starts server i again, as its supervisor would after it exited:
// a start that fails because the clock agent does not vouch for its clock yet
// (status 1) is retried every second, within timeout, until the fresh process is
// ready.
func (c *Cluster) RestartServer(ctx context.Context, i int, timeout time.Duration) error {
	c.mu.Lock()
	s := c.servers[i]
	c.mu.Unlock()
	deadline := time.Now().Add(timeout)
	for {
		err := c.startServer(s)
		if err == nil {
			return nil
		}
		code, _, exited := s.p.exitStatus()
		if !exited || code != 1 || time.Now().After(deadline) {
			return fmt.Errorf("restart %s: %w", s.name, err)
		}
		if !sleepCtx(ctx, time.Second) {
			return ctx.Err()
		}
	}
}

// writeClockSecret writes a new random secret of the replicas' agents into dir
// and returns it and its file.
func writeClockSecret(dir string) ([]byte, string, error) {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	secret := []byte(hex.EncodeToString(b))
	file := filepath.Join(dir, "clock.secret")
	return secret, file, os.WriteFile(file, secret, 0o600)
}

// clockArgs are the server flags that point replica s at its agent.
func (c *Cluster) clockArgs(s *serverProc) []string {
	return []string{"--clock-agent", s.agentAddr, "--clock-secret-file", c.clockSecretFile,
		"--clock-delta", ClockDelta.String(), "--clock-check-interval", clockInterval.String()}
}

// ShiftClockReference moves the reference time of server i's clock agent by d
// from true time, as an NTP server gone wrong would; with |d| > ClockDelta/2 the
// replica must fail closed for good. It is recorded as a fault of every client
// (they lose a replica).
func (c *Cluster) ShiftClockReference(i int, d time.Duration) {
	c.mu.Lock()
	s := c.servers[i]
	c.mu.Unlock()
	s.clock.NTP.SetOffset(d)
	c.record(Fault{Kind: "clock-agent-offset", Target: s.name, Global: true, At: time.Now(), Heal: time.Now()})
}

// Unbalance takes server i out of every proxy's rotation (the clients' and the
// gateway's) and closes their connections to it, as load balancers do once its
// /readyz fails.
func (c *Cluster) Unbalance(i int) {
	c.mu.Lock()
	backend := "127.0.0.1:" + fmt.Sprint(c.servers[i].port)
	proxies := make([]*Proxy, 0, len(c.clients)+1)
	for _, cl := range c.clients {
		proxies = append(proxies, cl.Proxy)
	}
	if c.gateway != nil {
		proxies = append(proxies, c.gateway.Proxy)
	}
	c.unbalanced = append(c.unbalanced, backend)
	c.mu.Unlock()
	for _, p := range proxies {
		p.Drain(backend)
	}
}

// ServerReady reports whether server i answers /readyz 200, and else the body.
func (c *Cluster) ServerReady(ctx context.Context, i int) (bool, string) {
	c.mu.Lock()
	s := c.servers[i]
	c.mu.Unlock()
	ok, body := readyz(ctx, "http://127.0.0.1:"+fmt.Sprint(s.port)+"/readyz")
	return ok, body
}

// clockFailures counts the replicas' clock check failures in their logs.
func (c *Cluster) clockFailures() int {
	files, _ := filepath.Glob(filepath.Join(c.dir, "server*.log"))
	n := 0
	for _, f := range files {
		if b, err := os.ReadFile(f); err == nil {
			n += bytes.Count(b, []byte(logClockFailed))
		}
	}
	return n
}

// ClockAgentOffset moves server1's clock reference 3 s away (Δ is 1 s) a while
// into the run: that replica must stop granting, renewing and reclaiming, never
// report ready again, and exit by itself with ExitClockUnverified, while server2
// carries the clients. Its supervisor (the harness) then starts a fresh process,
// which serves once the reference has come right; the checker stays clean.
func ClockAgentOffset() Scenario {
	return Scenario{
		Name:    "clock-agent-offset",
		Clients: func(p Plan) []ClientSpec { return uniform(4, ClientSpec{Sessions: 2, Batch: p.Batch}) },
		Inject: func(ctx context.Context, c *Cluster, cls []*Client, p Plan) error {
			sleepCtx(ctx, p.Faulting/3)
			c.ShiftClockReference(0, 3*time.Second)
			if err := c.AwaitLatchExit(ctx, 0); err != nil {
				return err
			}
			// The load balancers see server1 gone and take it out: the fault's heal,
			// from which every client must hold a lease again in time.
			c.Unbalance(0)
			c.record(Fault{Kind: "clock-agent-offset-exited", Target: "server1", Global: true, At: time.Now(), Heal: time.Now()})
			// The reference comes right again, and the supervisor starts a fresh
			// process: it must verify its clock before it turns ready.
			c.ShiftClockReference(0, 0)
			if err := c.RestartServer(ctx, 0, 30*time.Second); err != nil {
				return err
			}
			c.record(Fault{Kind: "clock-agent-offset-restarted", Target: "server1", Global: true, At: time.Now(), Heal: time.Now()})
			sleepCtx(ctx, p.Faulting/3)
			for i := range 2 {
				if ok, body := c.ServerReady(ctx, i); !ok {
					return fmt.Errorf("server%d is not ready: %s", i+1, body)
				}
			}
			return nil
		},
		Expect: func(r *Report) error {
			return errIf(r.ClockFailures != 1 || r.ClockExits != 1 || r.Grants < 10,
				"%d clock check failures (want 1), %d exits with status %d (want 1), %d grants",
				r.ClockFailures, r.ClockExits, ExitClockUnverified, r.Grants)
		},
	}
}

// readyz asks url once: whether it answered 200, and its body.
func readyz(ctx context.Context, url string) (bool, string) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false, err.Error()
	}
	resp, err := (&http.Client{Timeout: 2 * time.Second}).Do(req)
	if err != nil {
		return false, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return resp.StatusCode == http.StatusOK, string(b)
}
