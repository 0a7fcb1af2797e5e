package chaos

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/idkeeper/idkeeper/clockcheck/clockchecktest"
	"github.com/idkeeper/idkeeper/internal/harness/etcdtest"
	"github.com/idkeeper/idkeeper/internal/harness/pgtest"
	"github.com/idkeeper/idkeeper/internal/harness/redistest"
)

// Settings are the lease policy of a run's servers and the speed of its clients.
type Settings struct {
	FirstLease, LeaseDuration, Grace, CleanupInterval time.Duration
	Nodes                                             int // pool size
	// Slack is added to the liveness bound for retries, back-off and scheduling.
	Slack time.Duration
}

// LivenessBound is how long after a fault heals every live client must hold a
// lease again: lease + grace + cleanup interval + slack.
func (s Settings) LivenessBound() time.Duration {
	return s.LeaseDuration + s.Grace + s.CleanupInterval + s.Slack
}

// ClientSpec describes one client process.
type ClientSpec struct {
	Sessions, Count int // session slots; node IDs per session
	Batch           int // IDs per millisecond tick and slot
	// HoldMin and HoldMax, when HoldMax > 0, close each session after a random
	// hold (churn); else sessions run until lost.
	HoldMin, HoldMax time.Duration
	// Skew offsets the client's wall clock; it steps back by StepBack during the
	// second half of every StepPeriod.
	Skew, StepPeriod, StepBack time.Duration
	BackoffMax                 time.Duration // Open's back-off cap; 0: 1 s
	Tick                       time.Duration // minting period; 0: 1 ms
	// Twin makes every session claim the same machine ID, PID and start time as
	// every other Twin client's (chaosclient --twin).
	Twin bool
}

// Options configure a Cluster.
type Options struct {
	Settings
	AOF bool // Redis with appendfsync always; false: a Redis that persists nothing
	// Sentinel runs the store as a Redis Sentinel topology (redistest.StartSentinel:
	// a master, two replicas, three sentinels; AOF as above on every data node)
	// instead of one redis-server. WaitReplicas is the replicas'
	// --redis-wait-replicas (0: the flag is not given).
	Sentinel     bool
	WaitReplicas int
	// Etcd runs the store as a three-member etcd cluster (etcd.go) instead of
	// Redis; AOF, Sentinel and WaitReplicas are then unused.
	Etcd bool
	// Postgres runs the store as a PostgreSQL primary with a streaming standby
	// (postgres.go), synchronous when SyncStandby; AOF, Sentinel and WaitReplicas
	// are then unused.
	Postgres, SyncStandby bool
	// ServerControl, when set, runs the replicas as chaosserver on that store
	// control (internal/harness/chaos/controls); ClientControl is chaosclient's --control.
	// Both are for negative controls only; the gateway is never affected.
	ServerControl, ClientControl string
	// AgentProcess runs one real clock-agent process for both replicas
	// (agentflood.go) instead of an agent per replica in the harness's process.
	AgentProcess bool
}

// Fault is one injected fault. Global faults (the store, the servers) concern every
// client; the others only Target.
type Fault struct {
	Kind   string    `json:"kind"`
	Target string    `json:"target,omitempty"`
	Global bool      `json:"global,omitempty"`
	At     time.Time `json:"at"`
	Heal   time.Time `json:"heal"`
}

// Cluster is the topology of one chaos run on loopback: one redis-server (or a
// Sentinel topology, an etcd cluster, a PostgreSQL primary and standby: Options),
// two registry server replicas sharing it,
// and client processes that each reach the replicas through a Proxy of their own
// (balanced over both), so a test can cut or slow one client's network alone.
type Cluster struct {
	t      testing.TB
	dir    string
	bins   Binaries
	opts   Options
	apiKey string
	// adminKey is the servers' admin API key (IDKEEPER_ADMIN_API_KEY): the
	// lookups of property 6.
	adminKey string
	secret   string // the receipt secret every replica shares
	// Redis is the single redis-server, nil on a Sentinel topology; Sentinel is
	// that topology, nil on a single Redis. store is the URL of either, which the
	// replicas and every idkeeper command of the run are given.
	Redis    *redistest.Server
	Sentinel *redistest.Sentinel
	// Etcd is the etcd cluster of Options.Etcd (then Redis, Sentinel and rdb are nil).
	Etcd *etcdtest.Server
	// PG is the primary of Options.Postgres, PGStandby its standby (postgres.go).
	PG, PGStandby *pgtest.Server
	store         string
	rdb           *goredis.Client // on Sentinel, a failover client: it follows the master

	mu       sync.Mutex
	servers  []*serverProc
	clients  []*Client
	gateway  *Gateway
	faults   []Fault
	forger   *forger
	restores []*restoreRun // backups exported (and imported) in the run, restore.go

	clockSecret     []byte // the replicas' clock agents' secret (clock.go)
	clockSecretFile string
	unbalanced      []string // backends taken out of the proxies' rotation (Unbalance)
}

type serverProc struct {
	name  string
	port  int
	p     *process
	clock *clockchecktest.Agent // its clock agent, kept over its restarts; nil with Options.AgentProcess
	// agentAddr is the address of its clock agent.
	agentAddr string
	runs      []*process // every process started as this replica, p last
}

// Client is one client process of a Cluster, and its proxy.
type Client struct {
	Name   string
	Spec   ClientSpec
	Dir    string
	Proxy  *Proxy
	p      *process
	Start  time.Time
	Killed time.Time // zero while it runs
}

// StartCluster starts Redis (one server, or a Sentinel topology) and two server
// replicas and waits until both are ready. Everything is stopped in t.Cleanup.
func StartCluster(t testing.TB, dir string, bins Binaries, opts Options) *Cluster {
	t.Helper()
	var ropts []redistest.Option
	if opts.AOF {
		ropts = append(ropts, redistest.WithAOF())
	}
	key, admin, secret := make([]byte, 24), make([]byte, 24), make([]byte, 32)
	_, _ = rand.Read(key)
	_, _ = rand.Read(admin)
	_, _ = rand.Read(secret)
	c := &Cluster{t: t, dir: dir, bins: bins, opts: opts, apiKey: hex.EncodeToString(key), adminKey: hex.EncodeToString(admin),
		secret: hex.EncodeToString(secret)}
	switch {
	case opts.Etcd:
		c.startEtcd()
	case opts.Postgres:
		c.startPostgres()
	case opts.Sentinel:
		c.Sentinel = redistest.StartSentinel(t, redistest.WithDataOptions(ropts...))
		c.store = c.Sentinel.URL() // no password: argv is fine
		c.rdb = goredis.NewFailoverClient(&goredis.FailoverOptions{
			MasterName: c.Sentinel.MasterName(), SentinelAddrs: c.Sentinel.SentinelAddrs()})
	default:
		c.Redis = redistest.Start(t, ropts...)
		c.store = c.Redis.URL()
		c.rdb = goredis.NewClient(&goredis.Options{Addr: c.Redis.Addr()})
	}
	if c.rdb != nil {
		t.Cleanup(func() { c.rdb.Close() })
	}
	t.Cleanup(c.shutdown)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// A new deployment: initialised once, before the replicas start (DESIGN §7).
	if out, err := exec.Command(bins.Server, "init", "--store", c.store, "--nodes", strconv.Itoa(opts.Nodes)).CombinedOutput(); err != nil {
		t.Fatalf("idkeeper init: %v\n%s", err, out)
	}
	var err error
	if c.clockSecret, c.clockSecretFile, err = writeClockSecret(dir); err != nil {
		t.Fatal(err)
	}
	var sharedAgent string
	if opts.AgentProcess {
		if sharedAgent, err = c.startAgentProcess(); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 2 {
		s := &serverProc{name: fmt.Sprintf("server%d", i+1), agentAddr: sharedAgent}
		if sharedAgent == "" {
			if s.clock, err = clockchecktest.Start(c.clockSecret); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(s.clock.Close)
			s.agentAddr = s.clock.Addr
		}
		c.servers = append(c.servers, s)
		// Another test process may take the port between freePort and the server's
		// listen: then try another port, a few times.
		for try := 1; ; try++ {
			port, err := freePort()
			if err != nil {
				t.Fatal(err)
			}
			s.port = port
			err = c.startServer(s)
			if err == nil {
				break
			}
			if !errPortTaken(err) || try == 3 {
				t.Fatal(err)
			}
			t.Logf("%s: port %d was taken meanwhile; trying another", s.name, port)
		}
	}
	return c
}

func (c *Cluster) startServer(s *serverProc) error {
	o := c.opts
	args := []string{
		"--listen", "127.0.0.1:" + strconv.Itoa(s.port),
		"--store", c.store,
		"--first-lease", o.FirstLease.String(),
		"--lease-duration", o.LeaseDuration.String(),
		"--cleanup-grace", o.Grace.String(),
		"--cleanup-interval", o.CleanupInterval.String(),
		"--nodes", strconv.Itoa(o.Nodes),
		"--state-file", filepath.Join(c.dir, s.name+".state"), // kept across the replica's restarts
	}
	if o.WaitReplicas > 0 {
		args = append(args, "--redis-wait-replicas", strconv.Itoa(o.WaitReplicas))
	}
	bin := c.bins.ChaosServer
	if o.ServerControl != "" {
		args = append(args, "--control", o.ServerControl)
	} else {
		bin = c.bins.Server
		// Every client of a run shares the bootstrap key and together they may
		// hold the whole pool: no default key quota (issue #29) in this harness.
		args = append([]string{"server", "--unsafe-short-leases", "--shutdown-timeout", "2s", "--key-max-nodes-default", "0"}, args...)
		if !o.AOF {
			args = append(args, "--accept-lost-writes-on-redis-restart")
		}
		args = append(args, c.clockArgs(s)...)
	}
	env := []string{"IDKEEPER_BOOTSTRAP_API_KEY=" + c.apiKey, "IDKEEPER_ADMIN_API_KEY=" + c.adminKey, "IDKEEPER_RECEIPT_SECRET=" + c.secret}
	p, err := startProcess(s.name, filepath.Join(c.dir, s.name+".log"), env, bin, args...)
	if err != nil {
		return err
	}
	c.mu.Lock()
	s.p = p
	s.runs = append(s.runs, p)
	c.mu.Unlock()
	return waitHTTP(context.Background(), p, "http://127.0.0.1:"+strconv.Itoa(s.port)+"/readyz", 15*time.Second)
}

// backends are the servers a new proxy balances over: every replica not taken
// out of the rotation (Unbalance).
func (c *Cluster) backends() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]string, 0, len(c.servers))
	for _, s := range c.servers {
		if b := "127.0.0.1:" + strconv.Itoa(s.port); !slices.Contains(c.unbalanced, b) {
			out = append(out, b)
		}
	}
	return out
}

// AddClient starts a client process behind a new proxy.
func (c *Cluster) AddClient(spec ClientSpec) (*Client, error) {
	proxy, err := NewProxy(c.backends()...)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	name := fmt.Sprintf("c%d", len(c.clients)+1)
	c.mu.Unlock()
	cl := &Client{Name: name, Spec: spec, Proxy: proxy}
	if err := c.launch(cl); err != nil {
		proxy.Close()
		return nil, err
	}
	c.mu.Lock()
	c.clients = append(c.clients, cl)
	c.mu.Unlock()
	return cl, nil
}

func (c *Cluster) launch(cl *Client) error {
	cl.Dir = filepath.Join(c.dir, cl.Name)
	s := cl.Spec
	backoff := s.BackoffMax
	if backoff == 0 {
		backoff = time.Second
	}
	args := []string{
		"--server", "http://" + cl.Proxy.Addr(),
		"--name", cl.Name,
		"--out", cl.Dir,
		"--sessions", strconv.Itoa(max(s.Sessions, 1)),
		"--count", strconv.Itoa(max(s.Count, 1)),
		"--batch", strconv.Itoa(max(s.Batch, 1)),
		"--hold-min", s.HoldMin.String(),
		"--hold-max", s.HoldMax.String(),
		"--skew", s.Skew.String(),
		"--step-period", s.StepPeriod.String(),
		"--step-back", s.StepBack.String(),
		"--backoff-max", backoff.String(),
	}
	if s.Tick > 0 {
		args = append(args, "--tick", s.Tick.String())
	}
	if s.Twin {
		args = append(args, "--twin")
	}
	if c.opts.ClientControl != "" {
		args = append(args, "--control", c.opts.ClientControl)
	}
	env := []string{"CHAOS_API_KEY=" + c.apiKey}
	if err := os.MkdirAll(cl.Dir, 0o755); err != nil {
		return err
	}
	p, err := startProcess(cl.Name, filepath.Join(c.dir, cl.Name+".log"), env, c.bins.Client, args...)
	if err != nil {
		return err
	}
	cl.p, cl.Start = p, time.Now()
	return nil
}

// Clients returns every client process started so far, killed ones included.
func (c *Cluster) Clients() []*Client {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*Client(nil), c.clients...)
}

// Gateway returns the gateway, nil when none was started.
func (c *Cluster) Gateway() *Gateway {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gateway
}

// Faults returns the faults injected so far.
func (c *Cluster) Faults() []Fault {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Fault(nil), c.faults...)
}

func (c *Cluster) record(f Fault) {
	c.mu.Lock()
	c.faults = append(c.faults, f)
	c.mu.Unlock()
	c.t.Logf("fault %s %s: %s .. %s", f.Kind, f.Target, f.At.Format("15:04:05.000"), f.Heal.Format("15:04:05.000"))
}

// KillClient kills cl with SIGKILL mid-minting and starts a replacement process
// (a new client, name suffixed "r", behind the same proxy) after restartAfter.
func (c *Cluster) KillClient(ctx context.Context, cl *Client, restartAfter time.Duration) (*Client, error) {
	at := time.Now()
	cl.p.kill()
	cl.Killed = time.Now()
	if !sleepCtx(ctx, restartAfter) {
		return nil, ctx.Err()
	}
	n := &Client{Name: cl.Name + "r", Spec: cl.Spec, Proxy: cl.Proxy}
	if err := c.launch(n); err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.clients = append(c.clients, n)
	c.mu.Unlock()
	c.record(Fault{Kind: "kill-client", Target: cl.Name, At: at, Heal: n.Start})
	return n, nil
}

// PauseClient stops cl with SIGSTOP for d, then continues it with SIGCONT.
func (c *Cluster) PauseClient(ctx context.Context, cl *Client, d time.Duration) {
	at := time.Now()
	cl.p.stop()
	sleepCtx(ctx, d)
	cl.p.cont()
	c.record(Fault{Kind: "sigstop-client", Target: cl.Name, At: at, Heal: time.Now()})
}

// Disturb puts cl's proxy into mode (delay for the delaying modes) for d.
func (c *Cluster) Disturb(ctx context.Context, cl *Client, mode Mode, delay, d time.Duration) {
	heal := c.Disturbing(cl.Name, cl.Proxy, mode, delay)
	sleepCtx(ctx, d)
	heal()
}

// Disturbing puts the proxy of target (a client's or the gateway's) into mode at
// once and returns the function that heals it (back to Pass) and records the fault.
func (c *Cluster) Disturbing(target string, p *Proxy, mode Mode, delay time.Duration) (heal func()) {
	at := time.Now()
	p.Set(mode, delay)
	return func() {
		p.Set(Pass, 0)
		kind := mode.String()
		if delay > 0 {
			kind += " " + delay.String()
		}
		c.record(Fault{Kind: kind, Target: target, At: at, Heal: time.Now()})
	}
}

// KillLockHolder kills with SIGKILL the replica that holds the cleanup job lock,
// waiting up to 10 s to see the lock held, and restarts it after restartAfter.
// A lock still held by a replica killed before (killed mid-run, before it
// released the lock) is held until it lapses: the wait is then extended to 10 s
// past its lapse, when a live replica takes it.
func (c *Cluster) KillLockHolder(ctx context.Context, restartAfter time.Duration) error {
	if c.rdb == nil {
		return fmt.Errorf("KillLockHolder reads the lock from Redis: not on etcd")
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		v, err := c.rdb.HGet(ctx, "{idkeeper}:locks", "cleanup").Result()
		if err == nil {
			s, lapse := c.serverOfLock(v)
			if s == nil && !lapse.IsZero() {
				deadline = maxTime(deadline, lapse.Add(10*time.Second))
			}
			if s != nil {
				at := time.Now()
				s.p.kill()
				if !sleepCtx(ctx, restartAfter) {
					return ctx.Err()
				}
				if err := c.startServer(s); err != nil {
					return err
				}
				c.record(Fault{Kind: "kill-lock-holder", Target: s.name, Global: true, At: at, Heal: at})
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no replica was seen holding the cleanup lock (last: %q, %v)", v, err)
		}
		if !sleepCtx(ctx, 20*time.Millisecond) {
			return ctx.Err()
		}
	}
}

// serverOfLock returns the running replica named by a lock record
// "lockedAt,until,owner" that has not lapsed, or nil; with nil, lapse is when a
// lock that has not lapsed but names no running replica does.
func (c *Cluster) serverOfLock(rec string) (s *serverProc, lapse time.Time) {
	var at, until int64
	var owner string
	if n, _ := fmt.Sscanf(rec, "%d,%d,%s", &at, &until, &owner); n != 3 || until <= time.Now().UnixMilli() {
		return nil, time.Time{}
	}
	pid, ok := lockOwnerPID(owner)
	if !ok {
		return nil, time.Time{}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range c.servers {
		if s.p.PID() == pid && !s.p.exited() {
			return s, time.Time{}
		}
	}
	return nil, time.UnixMilli(until)
}

// ResetRedis restarts Redis so that it comes back empty: a store reset that the
// replicas must detect and answer with a quarantine (DESIGN §7). Without AOF the
// restart alone loses everything; with AOF every key is flushed first, so that the
// restart replays an empty data set, as a Redis without persistence would come back.
func (c *Cluster) ResetRedis(ctx context.Context) error {
	if c.Redis == nil {
		return fmt.Errorf("ResetRedis needs a single Redis, not a Sentinel topology")
	}
	at := time.Now()
	if c.opts.AOF {
		if err := c.rdb.FlushAll(ctx).Err(); err != nil {
			return err
		}
	}
	c.Redis.Restart(c.t)
	c.record(Fault{Kind: "redis-reset", Global: true, At: at, Heal: time.Now()})
	return nil
}

// RestartRedis kills Redis and starts it again on its data: with AOF (appendfsync
// always) nothing is lost, and the replicas must not treat the new replication ID
// as a reset.
func (c *Cluster) RestartRedis() {
	if c.Redis == nil {
		c.t.Errorf("RestartRedis needs a single Redis, not a Sentinel topology")
		return
	}
	at := time.Now()
	c.Redis.Restart(c.t)
	c.record(Fault{Kind: "redis-restart", Global: true, At: at, Heal: time.Now()})
}

// Stop ends the run: SIGTERM to every live client (each closes its sessions),
// then the servers and proxies. It returns the time the clients were told to stop.
func (c *Cluster) Stop() time.Time {
	end := c.StopClients()
	c.shutdown()
	return end
}

// StopClients stops the gateway and the clients, as Stop does, and leaves the
// servers running; it returns when it began.
func (c *Cluster) StopClients() time.Time {
	end := time.Now()
	var wg sync.WaitGroup
	if g := c.Gateway(); g != nil {
		wg.Go(g.stop)
	}
	for _, cl := range c.Clients() {
		if cl.Killed.IsZero() {
			wg.Go(func() {
				if !cl.p.terminate(15 * time.Second) {
					c.t.Logf("client %s did not exit cleanly (see %s.log)", cl.Name, cl.Name)
				}
			})
		}
	}
	wg.Wait()
	return end
}

func (c *Cluster) shutdown() {
	c.mu.Lock()
	servers, clients, gw := c.servers, c.clients, c.gateway
	c.mu.Unlock()
	if gw != nil {
		gw.stop()
	}
	for _, cl := range clients {
		if !cl.p.exited() {
			cl.p.kill()
		}
		cl.Proxy.Close()
	}
	for _, s := range servers {
		if s.p != nil {
			s.p.terminate(5 * time.Second)
		}
	}
}

// sleepCtx sleeps d or until ctx ends; it reports whether d passed.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
