package redistest

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// masterName is the name the sentinels monitor the master under.
const masterName = "mymaster"

// sentinelReadyTimeout bounds how long StartSentinel waits for the sentinels to
// know the master, both replicas and each other.
const sentinelReadyTimeout = 20 * time.Second

// SentinelOption changes how StartSentinel sets the topology up.
type SentinelOption func(*sentinelConfig)

type sentinelConfig struct {
	data       []Option // options of the master and the replicas
	sentinelPW string   // requirepass of the sentinels
}

// WithDataOptions gives the master and both replicas opts: WithAOF or
// WithAOFEverySec, WithPassword (requirepass and masterauth on every data node;
// the sentinels get it as auth-pass). WithCluster is refused.
func WithDataOptions(opts ...Option) SentinelOption {
	return func(c *sentinelConfig) { c.data = append(c.data, opts...) }
}

// WithSentinelPassword makes the sentinels require pw (requirepass in
// sentinel.conf), a password of their own, separate from the data nodes'.
func WithSentinelPassword(pw string) SentinelOption {
	return func(c *sentinelConfig) { c.sentinelPW = pw }
}

// Sentinel is a Redis Sentinel topology owned by one test: a master, two
// replicas and three sentinels monitoring the master as "mymaster" with a
// quorum of 2, every process on its own free loopback port. A killed master is
// detected within a second (down-after-milliseconds 1000) and replaced by a
// replica a few seconds later.
type Sentinel struct {
	cfg       sentinelConfig
	dataPW    string
	nodes     []*Server // the first master, then the two replicas
	sentinels []*sentinelProc
}

// sentinelProc is one `redis-server sentinel.conf --sentinel` process.
type sentinelProc struct {
	bin  string
	conf string
	port int
	pw   string

	mu   sync.Mutex
	proc *process
}

// StartSentinel starts a master, two replicas attached to it (REPLICAOF) and
// three sentinels, and returns once every sentinel knows the master, both
// replicas and the two other sentinels, so a failover can happen. It calls
// t.Fatalf (with the process's log) when something does not come up, never
// t.Skip. Every process is killed in t.Cleanup.
func StartSentinel(t testing.TB, opts ...SentinelOption) *Sentinel {
	t.Helper()
	st := &Sentinel{}
	for _, o := range opts {
		o(&st.cfg)
	}
	var dc config
	for _, o := range st.cfg.data {
		o(&dc)
	}
	if dc.cluster {
		t.Fatalf("redistest: StartSentinel: WithCluster is not a data node option")
	}
	st.dataPW = dc.password

	master := Start(t, st.cfg.data...)
	st.nodes = []*Server{master}
	for i := 0; i < 2; i++ {
		r := Start(t, st.cfg.data...)
		r.ReplicaOf(t, master)
		st.nodes = append(st.nodes, r)
	}

	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redistest: redis-server not found on PATH: %v", err)
	}
	for i := 0; i < 3; i++ {
		sp := &sentinelProc{bin: bin, pw: st.cfg.sentinelPW}
		t.Cleanup(sp.kill)
		dir := t.TempDir()
		var lastErr error
		for attempt := 0; attempt < 5; attempt++ {
			port, err := freePort()
			if err != nil {
				t.Fatalf("redistest: no free loopback port: %v", err)
			}
			sp.conf = filepath.Join(dir, "sentinel-"+strconv.Itoa(port)+".conf")
			if err := os.WriteFile(sp.conf, []byte(st.sentinelConf(port, master, dir)), 0o600); err != nil {
				t.Fatalf("redistest: writing %s: %v", sp.conf, err)
			}
			if lastErr = sp.launch(port); lastErr == nil {
				break
			}
		}
		if lastErr != nil {
			t.Fatalf("redistest: sentinel %d did not start: %v", i+1, lastErr)
		}
		st.sentinels = append(st.sentinels, sp)
	}
	st.waitReady(t, master.Addr())
	return st
}

// sentinelConf is the configuration of a sentinel on port monitoring master.
func (st *Sentinel) sentinelConf(port int, master *Server, dir string) string {
	host, mport, _ := net.SplitHostPort(master.Addr())
	var b strings.Builder
	fmt.Fprintf(&b, "port %d\nbind 127.0.0.1\ndaemonize no\nlogfile \"\"\ndir %s\n", port, confQuote(dir))
	b.WriteString("sentinel resolve-hostnames no\n")
	fmt.Fprintf(&b, "sentinel monitor %s %s %s 2\n", masterName, host, mport)
	fmt.Fprintf(&b, "sentinel down-after-milliseconds %s 1000\n", masterName)
	fmt.Fprintf(&b, "sentinel failover-timeout %s 5000\n", masterName)
	fmt.Fprintf(&b, "sentinel parallel-syncs %s 1\n", masterName)
	if st.dataPW != "" {
		fmt.Fprintf(&b, "sentinel auth-pass %s %s\n", masterName, confQuote(st.dataPW))
	}
	if st.cfg.sentinelPW != "" {
		fmt.Fprintf(&b, "requirepass %s\n", confQuote(st.cfg.sentinelPW))
	}
	return b.String()
}

// confQuote quotes s for a Redis configuration file.
func confQuote(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`, "\r", `\r`)
	return `"` + r.Replace(s) + `"`
}

// waitReady waits until every sentinel names master, and sees both replicas
// connected and the two other sentinels.
func (st *Sentinel) waitReady(t testing.TB, master string) {
	t.Helper()
	deadline := time.Now().Add(sentinelReadyTimeout)
	for {
		var notReady error
		for i, sp := range st.sentinels {
			if err := sp.ready(master); err != nil {
				notReady = fmt.Errorf("sentinel %d (%s): %w", i+1, sp.addr(), err)
				break
			}
		}
		if notReady == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("redistest: the sentinels were not ready within %v: %v\n%s",
				sentinelReadyTimeout, notReady, st.logs())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// ready reports nil when the sentinel names master as the master, knows two
// replicas whose links are up and two other sentinels none of which is down.
func (sp *sentinelProc) ready(master string) error {
	if m, err := sp.masterAddr(); err != nil {
		return err
	} else if m != master {
		return fmt.Errorf("master is %s, want %s", m, master)
	}
	replicas, err := sp.table("REPLICAS")
	if err != nil {
		return err
	}
	if len(replicas) != 2 {
		return fmt.Errorf("knows %d replicas, want 2", len(replicas))
	}
	for _, r := range replicas {
		if r["flags"] != "slave" || r["master-link-status"] != "ok" {
			return fmt.Errorf("replica %s:%s: flags %s, master-link-status %s",
				r["ip"], r["port"], r["flags"], r["master-link-status"])
		}
	}
	others, err := sp.table("SENTINELS")
	if err != nil {
		return err
	}
	if len(others) != 2 {
		return fmt.Errorf("knows %d other sentinels, want 2", len(others))
	}
	for _, o := range others {
		if o["flags"] != "sentinel" {
			return fmt.Errorf("sentinel %s:%s: flags %s", o["ip"], o["port"], o["flags"])
		}
	}
	return nil
}

// table asks SENTINEL what (REPLICAS, SENTINELS) and returns each entry's fields.
func (sp *sentinelProc) table(what string) ([]map[string]string, error) {
	v, err := do(sp.addr(), sp.pw, "SENTINEL", what, masterName)
	if err != nil {
		return nil, fmt.Errorf("SENTINEL %s: %w", what, err)
	}
	list, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("SENTINEL %s: reply %v is not an array", what, v)
	}
	var out []map[string]string
	for _, e := range list {
		kv, _ := e.([]any)
		m := map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			k, _ := kv[i].(string)
			val, _ := kv[i+1].(string)
			m[k] = val
		}
		out = append(out, m)
	}
	return out, nil
}

// masterAddr asks the sentinel for the master's host:port.
func (sp *sentinelProc) masterAddr() (string, error) {
	v, err := do(sp.addr(), sp.pw, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", masterName)
	if err != nil {
		return "", err
	}
	a, ok := v.([]any)
	if !ok || len(a) != 2 {
		return "", fmt.Errorf("GET-MASTER-ADDR-BY-NAME: reply %v", v)
	}
	host, _ := a[0].(string)
	port, _ := a[1].(string)
	return net.JoinHostPort(host, port), nil
}

// MasterName is the name the sentinels know the master by: "mymaster".
func (st *Sentinel) MasterName() string { return masterName }

// SentinelAddrs are the sentinels' host:port addresses.
func (st *Sentinel) SentinelAddrs() []string {
	addrs := make([]string, len(st.sentinels))
	for i, sp := range st.sentinels {
		addrs[i] = sp.addr()
	}
	return addrs
}

// Password is the data nodes' password (WithDataOptions(WithPassword(…))), "" without one.
func (st *Sentinel) Password() string { return st.dataPW }

// SentinelPassword is the sentinels' password (WithSentinelPassword), "" without one.
func (st *Sentinel) SentinelPassword() string { return st.cfg.sentinelPW }

// URL is the topology in IdKeeper's redis+sentinel form, go-redis's
// ParseFailoverURL form under a scheme of its own: the first sentinel as the
// host with the sentinels' password as the user info's, the others as addr
// parameters, the data nodes' password as the password parameter:
//
//	redis+sentinel://[:SENTINELPW@]127.0.0.1:P1/0?addr=127.0.0.1:P2&addr=127.0.0.1:P3&master_name=mymaster[&password=DATAPW]
func (st *Sentinel) URL() string {
	addrs := st.SentinelAddrs()
	var b strings.Builder
	b.WriteString("redis+sentinel://")
	if st.cfg.sentinelPW != "" {
		b.WriteString(url.UserPassword("", st.cfg.sentinelPW).String() + "@")
	}
	b.WriteString(addrs[0] + "/0?")
	for _, a := range addrs[1:] {
		b.WriteString("addr=" + a + "&")
	}
	b.WriteString("master_name=" + masterName)
	if st.dataPW != "" {
		b.WriteString("&password=" + url.QueryEscape(st.dataPW))
	}
	return b.String()
}

// Nodes are the data nodes: the first master, then the two replicas. Which is
// master now is Master's to say.
func (st *Sentinel) Nodes() []*Server { return append([]*Server(nil), st.nodes...) }

// Master is the data node the sentinels name as master now (the first sentinel
// that answers), nil when none answers or it names no node of the topology.
func (st *Sentinel) Master() *Server {
	for _, sp := range st.sentinels {
		if addr, err := sp.masterAddr(); err == nil {
			return st.node(addr)
		}
	}
	return nil
}

func (st *Sentinel) node(addr string) *Server {
	for _, n := range st.nodes {
		if n.Addr() == addr {
			return n
		}
	}
	return nil
}

// KillMaster kills the current master with SIGKILL, as a crash, and returns its
// address (for WaitFailover). The sentinels see it down after a second.
func (st *Sentinel) KillMaster(t testing.TB) string {
	t.Helper()
	m := st.Master()
	if m == nil {
		t.Fatalf("redistest: KillMaster: the sentinels name no master of the topology\n%s", st.logs())
	}
	m.Stop(t)
	return m.Addr()
}

// WaitFailover waits until every sentinel names the same master other than old,
// that node answers ROLE as master, and every other running data node
// replicates from it with its link up (so WAIT can be acknowledged again). It
// returns the new master, or calls t.Fatalf with the sentinels' view and logs
// after timeout.
func (st *Sentinel) WaitFailover(t testing.TB, old string, timeout time.Duration) *Server {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		m, err := st.failedOver(old)
		if err == nil {
			return m
		}
		if time.Now().After(deadline) {
			t.Fatalf("redistest: no failover from %s within %v: %v\n%s", old, timeout, err, st.logs())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (st *Sentinel) failedOver(old string) (*Server, error) {
	var addr string
	for i, sp := range st.sentinels {
		a, err := sp.masterAddr()
		if err != nil {
			return nil, fmt.Errorf("sentinel %d: %w", i+1, err)
		}
		if a == old {
			return nil, fmt.Errorf("sentinel %d still names %s", i+1, old)
		}
		if addr != "" && a != addr {
			return nil, fmt.Errorf("the sentinels name %s and %s", addr, a)
		}
		addr = a
	}
	m := st.node(addr)
	if m == nil {
		return nil, fmt.Errorf("the sentinels name %s, no node of the topology", addr)
	}
	role, err := do(addr, st.dataPW, "ROLE")
	if err != nil {
		return nil, fmt.Errorf("ROLE on %s: %w", addr, err)
	}
	if r, _ := role.([]any); len(r) == 0 || r[0] != "master" {
		return nil, fmt.Errorf("%s answers ROLE %v", addr, role)
	}
	_, mport, _ := net.SplitHostPort(addr)
	for _, n := range st.nodes {
		if n == m || !n.running() {
			continue
		}
		info, err := doString(n.Addr(), st.dataPW, "INFO", "replication")
		if err != nil {
			return nil, fmt.Errorf("INFO on %s: %w", n.Addr(), err)
		}
		if infoField(info, "master_port") != mport || infoField(info, "master_link_status") != "up" {
			return nil, fmt.Errorf("%s: role %s, master_port %s, master_link_status %s", n.Addr(),
				infoField(info, "role"), infoField(info, "master_port"), infoField(info, "master_link_status"))
		}
	}
	return m, nil
}

// logs is every sentinel's INFO sentinel and log tail, for a failure message.
func (st *Sentinel) logs() string {
	var b strings.Builder
	for i, sp := range st.sentinels {
		info, err := doString(sp.addr(), sp.pw, "INFO", "sentinel")
		if err != nil {
			info = err.Error()
		}
		fmt.Fprintf(&b, "--- sentinel %d (%s): %s\n", i+1, sp.addr(), infoField(info, "master0"))
		sp.mu.Lock()
		if sp.proc != nil {
			b.WriteString(logTail(sp.proc.out) + "\n")
		}
		sp.mu.Unlock()
	}
	return b.String()
}

func (sp *sentinelProc) addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(sp.port)) }

// launch starts the sentinel on port and returns once it answers PING.
func (sp *sentinelProc) launch(port int) error {
	if port == 6379 || port == 26379 {
		return fmt.Errorf("refusing the default Redis port %d", port)
	}
	p, err := startProcess(sp.bin, sp.conf, "--sentinel")
	if err != nil {
		return err
	}
	cmd, out := p.cmd, p.out
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	deadline := time.Now().Add(startTimeout)
	for {
		select {
		case <-p.done:
			return fmt.Errorf("redis-server --sentinel on port %d exited: %s", port, logTail(out))
		default:
		}
		if ping(addr, sp.pw) == nil {
			sp.mu.Lock()
			sp.port, sp.proc = port, p
			sp.mu.Unlock()
			return nil
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-p.done
			return fmt.Errorf("redis-server --sentinel on port %d did not answer PING within %v: %s",
				port, startTimeout, logTail(out))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (sp *sentinelProc) kill() {
	sp.mu.Lock()
	p := sp.proc
	sp.proc = nil
	sp.mu.Unlock()
	if p == nil {
		return
	}
	_ = p.cmd.Process.Kill()
	<-p.done
}

// running reports whether the server's process is up (not stopped or killed).
func (s *Server) running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.proc != nil
}
