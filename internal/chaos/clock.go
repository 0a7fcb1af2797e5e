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
// into the run: that replica must stop granting, renewing and reclaiming and
// report not ready for the rest of the run, while server2 carries the clients;
// the checker stays clean.
func ClockAgentOffset() Scenario {
	return Scenario{
		Name:    "clock-agent-offset",
		Clients: func(p Plan) []ClientSpec { return uniform(4, ClientSpec{Sessions: 2, Batch: p.Batch}) },
		Inject: func(ctx context.Context, c *Cluster, cls []*Client, p Plan) error {
			sleepCtx(ctx, p.Faulting/3)
			c.ShiftClockReference(0, 3*time.Second)
			deadline := time.Now().Add(10 * time.Second)
			for {
				ok, body := c.ServerReady(ctx, 0)
				if !ok && strings.Contains(body, "CLOCK_UNVERIFIED") {
					break
				}
				if time.Now().After(deadline) || ctx.Err() != nil {
					return fmt.Errorf("server1 still ready 10 s after its clock reference moved 3 s: %s", body)
				}
				sleepCtx(ctx, 50*time.Millisecond)
			}
			// The load balancers see /readyz fail and take server1 out: the fault's
			// heal, from which every client must hold a lease again in time.
			c.Unbalance(0)
			c.record(Fault{Kind: "clock-agent-offset-unbalanced", Target: "server1", Global: true, At: time.Now(), Heal: time.Now()})
			// The reference comes right again: the replica must stay failed.
			c.ShiftClockReference(0, 0)
			sleepCtx(ctx, p.Faulting*2/3)
			if ok, body := c.ServerReady(ctx, 0); ok {
				return fmt.Errorf("server1 turned ready again by itself after its clock check failed: %s", body)
			}
			if ok, body := c.ServerReady(ctx, 1); !ok {
				return fmt.Errorf("server2 is not ready: %s", body)
			}
			return nil
		},
		Expect: func(r *Report) error {
			return errIf(r.ClockFailures != 1 || r.Grants < 10, "%d clock check failures (want 1), %d grants",
				r.ClockFailures, r.Grants)
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
