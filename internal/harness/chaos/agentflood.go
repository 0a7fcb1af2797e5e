package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idkeeper/idkeeper/clockcheck"
	"github.com/idkeeper/idkeeper/internal/harness/ntptest"
)

// The agent flood of issue #29: a stranger who can open TCP connections to the
// clock agent must not be able to stop the replicas. Both replicas sample one
// real `idkeeper clock-agent` process, listening on 127.0.0.1 with the
// allow-list 127.0.0.1/32, while the harness keeps 1,000 connections open to it
// from 127.0.0.2 (loopback answers the whole of 127.0.0.0/8 on Linux).

// Flood settings: the connections kept open, and how long.
const (
	floodConns    = 1000
	floodShort    = 8 * time.Second // 40 sample rounds per replica at the harness's 200 ms
	floodLong     = time.Minute
	floodSource   = "127.0.0.2"
	floodMaxDials = 20_000_000 // a bound on the load loop's count, whatever the machine's speed
	// floodRedialWait paces each flooding goroutine: at most 4,000 dials a second
	// in all. Unpaced, the flooder in the test process took the 2-core CI machine's
	// CPU from the replicas (a CPU flood from the replicas' own host, not what the
	// allow-list is for) and one replica stopped answering.
	floodRedialWait = 250 * time.Millisecond
	logAgentReady   = "clock agent listening"
	logAgentStopped = "clock agent stopped"
	// logSampleRetried is what a replica logs for a sample that needed more than
	// one attempt (clockcheck.Monitor).
	logSampleRetried = "clock sample taken after I/O failures"
)

// startAgentProcess starts the replicas' shared clock agent, a real
// `idkeeper clock-agent` process fed by a test NTP server, on a free loopback
// port with the allow-list 127.0.0.1/32, and returns its address once it
// listens. It is stopped, and its counts logged, in t.Cleanup.
func (c *Cluster) startAgentProcess() (string, error) {
	ntp, err := ntptest.Start()
	if err != nil {
		return "", err
	}
	logPath := filepath.Join(c.dir, "clock-agent.log")
	p, err := startProcess("clock-agent", logPath, nil, c.bins.Server, "clock-agent",
		"--listen", "127.0.0.1:0", "--allow", "127.0.0.1/32", "--secret-file", c.clockSecretFile,
		"--ntp-server", ntp.Addr(), "--poll-interval", "1s", "--log-format", "json", "--log-level", "debug")
	if err != nil {
		ntp.Close()
		return "", err
	}
	c.t.Cleanup(func() {
		p.terminate(5 * time.Second)
		ntp.Close()
		if rec, ok := logRecord(logPath, logAgentStopped); ok {
			n := func(k string) int64 { f, _ := rec[k].(float64); return int64(f) }
			c.t.Logf("clock agent stopped: answered %d, denied %d, refused %d, malformed %d",
				n("answered"), n("denied"), n("refused"), n("malformed"))
		}
	})
	deadline := time.Now().Add(15 * time.Second)
	for {
		if rec, ok := logRecord(logPath, logAgentReady); ok {
			addr, _ := rec["addr"].(string)
			return addr, nil
		}
		if p.exited() || time.Now().After(deadline) {
			return "", fmt.Errorf("the clock agent did not listen (see %s); its log ends:\n%s", logPath, logTail(logPath, 2048))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// serverLogCount counts the lines of the replicas' logs that hold s.
func (c *Cluster) serverLogCount(s string) int {
	files, _ := filepath.Glob(filepath.Join(c.dir, "server*.log"))
	n := 0
	for _, f := range files {
		if b, err := os.ReadFile(f); err == nil {
			n += strings.Count(string(b), s)
		}
	}
	return n
}

// logRecord returns the first JSON log record of the file whose msg is msg.
func logRecord(path, msg string) (map[string]any, bool) {
	f, err := os.Open(path)
	if err != nil {
		return nil, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var rec map[string]any
		if json.Unmarshal(sc.Bytes(), &rec) == nil && rec["msg"] == msg {
			return rec, true
		}
	}
	return nil, false
}

// floodStats counts what the flooder saw.
type floodStats struct {
	opened     atomic.Int64 // connections the agent accepted
	unanswered atomic.Int64 // closed by the agent without a byte
	answered   atomic.Int64 // got bytes back: must stay 0
	dialErrors atomic.Int64
	open, peak atomic.Int64 // connections open now, and at most
}

// flood keeps conns connections open from src to addr until ctx ends or
// floodMaxDials were opened, reopening each as soon as the agent closes it; half
// of them send a valid request line first. It returns when every connection is
// closed.
func flood(ctx context.Context, src, addr string, conns int) *floodStats {
	st := &floodStats{}
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: time.Second}
	var wg sync.WaitGroup
	for i := range conns {
		wg.Go(func() {
			buf := make([]byte, 512)
			for ctx.Err() == nil && st.opened.Load() < floodMaxDials {
				conn, err := d.DialContext(ctx, "tcp", addr)
				if err != nil {
					st.dialErrors.Add(1)
					sleepCtx(ctx, 10*time.Millisecond)
					continue
				}
				st.opened.Add(1)
				if n := st.open.Add(1); n > st.peak.Load() {
					st.peak.Store(n) // racy maximum: a figure, not a check
				}
				stop := context.AfterFunc(ctx, func() { conn.Close() })
				if i%2 == 0 {
					_, _ = conn.Write(clockcheck.NewRequest().AppendLine(nil))
				}
				_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
				n, _ := io.ReadFull(conn, buf[:1])
				stop()
				conn.Close()
				st.open.Add(-1)
				if n > 0 {
					st.answered.Add(1)
				} else if ctx.Err() == nil {
					st.unanswered.Add(1)
				}
				sleepCtx(ctx, floodRedialWait)
			}
		})
	}
	wg.Wait()
	return st
}

// replicaCounts sums the replicas' successful Allocs and Renews from their
// /metrics.
func (c *Cluster) replicaCounts(ctx context.Context) (allocs, renews float64, err error) {
	c.mu.Lock()
	servers := append([]*serverProc(nil), c.servers...)
	c.mu.Unlock()
	for _, s := range servers {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://127.0.0.1:"+strconv.Itoa(s.port)+"/metrics", nil)
		resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
		if err != nil {
			return 0, 0, fmt.Errorf("%s /metrics: %w", s.name, err)
		}
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			for _, m := range []struct {
				prefix string
				sum    *float64
			}{{`idkeeper_alloc_total{code="OK"} `, &allocs}, {`idkeeper_renew_total{code="OK"} `, &renews}} {
				if v, ok := strings.CutPrefix(line, m.prefix); ok {
					f, _ := strconv.ParseFloat(v, 64)
					*m.sum += f
				}
			}
		}
		resp.Body.Close()
	}
	return allocs, renews, nil
}

// watchReady asks every replica's /readyz every 250 ms until ctx ends and
// returns the first answer that was not ready twice in a row, or "". A latched
// replica never turns ready again; a single slow answer on a loaded machine is
// not a latch.
func (c *Cluster) watchReady(ctx context.Context) string {
	var failed [2]bool
	for {
		for i := range 2 {
			ok, body := c.ServerReady(ctx, i)
			if ctx.Err() != nil {
				return ""
			}
			if !ok && failed[i] {
				return fmt.Sprintf("server%d not ready: %s", i+1, body)
			}
			failed[i] = !ok
		}
		if !sleepCtx(ctx, 250*time.Millisecond) {
			return ""
		}
	}
}

// AgentFlood floods the replicas' shared clock agent from a source off its
// allow-list — 1,000 connections kept open from 127.0.0.2, for 8 s (1 min in
// long mode) — while the clients mint: no replica may latch or turn unready,
// grants and renewals continue through it, and the stranger gets no answer.
func AgentFlood() Scenario {
	return Scenario{
		Name:         "agent-flood",
		AgentProcess: true,
		Clients: func(p Plan) []ClientSpec {
			// Churn: sessions close after 1–2 s, so that grants continue during the flood.
			return uniform(3, ClientSpec{Sessions: 2, Batch: p.Batch, HoldMin: time.Second, HoldMax: 2 * time.Second})
		},
		Inject: func(ctx context.Context, c *Cluster, cls []*Client, p Plan) error {
			d := floodShort
			if p.Long {
				d = floodLong
			}
			addr := c.servers[0].agentAddr
			allocs0, renews0, err := c.replicaCounts(ctx)
			if err != nil {
				return err
			}
			fctx, cancel := context.WithTimeout(ctx, d)
			defer cancel()
			var notReady string
			var wg sync.WaitGroup
			wg.Go(func() { notReady = c.watchReady(fctx) })
			start := time.Now()
			st := flood(fctx, floodSource, addr, floodConns)
			took := time.Since(start)
			wg.Wait()
			allocs1, renews1, err := c.replicaCounts(ctx)
			if err != nil {
				return err
			}
			c.t.Logf("agent-flood: %s from %s: %d connections opened (%.0f/s), %d closed unanswered, %d answered, %d dial errors, "+
				"at most %d open at once; the replicas granted %.0f and renewed %.0f meanwhile, and retried %d samples",
				took.Round(time.Millisecond), floodSource, st.opened.Load(), float64(st.opened.Load())/took.Seconds(),
				st.unanswered.Load(), st.answered.Load(), st.dialErrors.Load(), st.peak.Load(), allocs1-allocs0, renews1-renews0,
				c.serverLogCount(logSampleRetried))
			return errors.Join(
				errIf(notReady != "", "during the flood: %s", notReady),
				errIf(st.answered.Load() != 0, "a source off the allow-list got %d answers", st.answered.Load()),
				errIf(st.opened.Load() < floodConns, "the flood opened only %d connections", st.opened.Load()),
				errIf(allocs1 <= allocs0 || renews1 <= renews0, "grants (%.0f → %.0f) or renewals (%.0f → %.0f) stopped during the flood",
					allocs0, allocs1, renews0, renews1),
			)
		},
		Expect: func(r *Report) error {
			return errIf(r.ClockFailures != 0 || r.Grants < 10, "%d clock check failures (want 0), %d grants", r.ClockFailures, r.Grants)
		},
	}
}
