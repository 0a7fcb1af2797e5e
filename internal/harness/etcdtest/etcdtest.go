// Package etcdtest starts embedded etcd servers (go.etcd.io/etcd/server/v3/embed)
// for tests: a member runs inside the test binary, on free loopback ports, with
// its data directory in t.TempDir(), and is stopped in t.Cleanup. Nothing is
// installed and nothing is skipped: when etcd cannot start, the test fails with
// the reason.
//
// Members are configured with the limits the etcd store needs (MaxTxnOps,
// MaxRequestBytes; see the etcd package doc), so the tests run against the
// settings the documentation asks operators for.
//
// Start runs one member; StartCluster runs several, whose peers reach each other
// through gates, so that a test can kill a member (Kill, Restart) or cut it off
// from its peers (Isolate).
package etcdtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// The server limits every member runs with: those the etcd store's doc asks for
// (etcd's defaults are 128 operations and 1.5 MiB).
const (
	MaxTxnOps       = 32768
	MaxRequestBytes = 10 << 20
)

// grpcOverhead is what a request may carry beyond MaxRequestBytes in gRPC framing;
// clients may send that much more, so that etcd, not the client, refuses a request
// that is too large, with its own error.
const grpcOverhead = 512 << 10

// readyTimeout bounds the wait for a member to serve. An embedded member starts in
// well under a second; the race detector and a loaded machine make it slower.
const readyTimeout = time.Minute

// startAttempts is how often Start tries again when a free port it picked was
// taken by someone else before the member bound it.
const startAttempts = 3

// Options change how Start runs a member. The zero value is what Start uses.
type Options struct {
	// Fsync makes the member fsync its WAL and database as a production member
	// does. Off by default: the tests check the store's logic, and an fsync per
	// transaction only makes them slower. Benchmarks that measure durable writes
	// turn it on.
	Fsync bool
	// MaxTxnOps and MaxRequestBytes replace the package's limits when not zero,
	// for tests of a server that allows less than the store needs.
	MaxTxnOps       uint
	MaxRequestBytes uint
}

// Server is a running embedded etcd: its members and a client on all of them.
type Server struct {
	members []*member
	client  *clientv3.Client
	stop    sync.Once

	mu       sync.Mutex
	isolated map[string]bool // IDs (hex) of the members cut off from their peers
}

// member is one embedded etcd server.
type member struct {
	name      string
	id        string // its member ID in hex, as rafthttp names it
	etcd      *embed.Etcd
	clientURL string
	logLevel  zap.AtomicLevel
	closeMu   sync.Mutex
	closed    bool
	// In a cluster: the gate in front of its peer listener, and what Restart
	// launches it again with.
	gate   *gate
	launch func() (*embed.Etcd, zap.AtomicLevel, error)
}

// close stops the member, once: a second embed.Etcd.Close would wait forever.
// etcd logs its listeners' closing as errors; those are silenced.
func (m *member) close() {
	m.closeMu.Lock()
	defer m.closeMu.Unlock()
	if m.closed {
		return
	}
	m.closed = true
	m.logLevel.SetLevel(zapcore.FatalLevel)
	m.etcd.Close()
}

// Start starts a single-member etcd for t and returns it once it serves, with a
// client. The member and the client are closed in t.Cleanup.
func Start(t testing.TB) *Server { return StartWith(t, Options{}) }

// StartWith is Start with options.
func StartWith(t testing.TB, o Options) *Server {
	t.Helper()
	var errs []error
	for range startAttempts {
		m, err := startMember(t.TempDir(), "m0", o)
		if err == nil {
			s := &Server{members: []*member{m}}
			t.Cleanup(func() { s.shutdown() })
			if s.client, err = s.NewClient(); err != nil {
				t.Fatalf("etcdtest: a client on %v: %v", s.Endpoints(), err)
			}
			return s
		}
		errs = append(errs, err)
		if !strings.Contains(err.Error(), "address already in use") {
			break
		}
	}
	t.Fatalf("etcdtest: the embedded etcd did not start: %v", errors.Join(errs...))
	return nil
}

// startMember starts one member whose data lives under dir, as a cluster of its
// own, and waits until it serves.
func startMember(dir, name string, o Options) (*member, error) {
	ports, err := freePorts(2)
	if err != nil {
		return nil, err
	}
	p := peer{name: name, client: loopURL(ports[0]), peer: loopURL(ports[1])}
	e, level, err := launch(dir, p, []peer{p}, "etcdtest-"+name, o, false)
	if err != nil {
		return nil, err
	}
	if err := awaitReady(e, level, name); err != nil {
		return nil, err
	}
	return &member{name: name, etcd: e, clientURL: p.client.String(), logLevel: level}, nil
}

// peer is a member's name and URLs, as the initial cluster lists it. listenPeer,
// when set, is where the member listens for its peers, behind a gate on peer.
type peer struct {
	name                     string
	client, peer, listenPeer url.URL
}

func loopURL(port int) url.URL {
	return url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", port)}
}

// launch starts the embedded server of p, one of cluster, without waiting for it.
// With existing, the member rejoins the cluster from its data directory.
func launch(dir string, p peer, cluster []peer, token string, o Options, existing bool) (*embed.Etcd, zap.AtomicLevel, error) {
	cfg := embed.NewConfig()
	cfg.Name = p.name
	cfg.Dir = filepath.Join(dir, p.name+".etcd")
	cfg.ListenClientUrls = []url.URL{p.client}
	cfg.AdvertiseClientUrls = []url.URL{p.client}
	cfg.ListenPeerUrls = []url.URL{p.peer}
	if p.listenPeer.Host != "" {
		cfg.ListenPeerUrls = []url.URL{p.listenPeer}
	}
	if existing {
		cfg.ClusterState = embed.ClusterStateFlagExisting
	}
	cfg.AdvertisePeerUrls = []url.URL{p.peer}
	var initial []string
	for _, c := range cluster {
		initial = append(initial, c.name+"="+c.peer.String())
	}
	cfg.InitialCluster = strings.Join(initial, ",")
	cfg.InitialClusterToken = token
	cfg.MaxTxnOps = MaxTxnOps
	cfg.MaxRequestBytes = MaxRequestBytes
	cfg.UnsafeNoFsync = !o.Fsync
	if o.MaxTxnOps != 0 {
		cfg.MaxTxnOps = o.MaxTxnOps
	}
	if o.MaxRequestBytes != 0 {
		cfg.MaxRequestBytes = o.MaxRequestBytes
	}
	// Test transactions of thousands of operations apply slowly under the race
	// detector; etcd would warn about each.
	cfg.WarningApplyDuration = 10 * time.Second
	level := zap.NewAtomicLevelAt(zapcore.ErrorLevel)
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(serverLogger(level))
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, level, fmt.Errorf("start member %s on %s: %w", p.name, p.client.Host, err)
	}
	return e, level, nil
}

// awaitReady waits until e serves (for a member of a cluster: until the cluster
// has a quorum), and closes it when it fails or does not within readyTimeout.
func awaitReady(e *embed.Etcd, level zap.AtomicLevel, name string) error {
	select {
	case <-e.Server.ReadyNotify():
		return nil
	case err := <-e.Err():
		level.SetLevel(zapcore.FatalLevel)
		e.Close()
		return fmt.Errorf("member %s failed while starting: %w", name, err)
	case <-time.After(readyTimeout):
		level.SetLevel(zapcore.FatalLevel)
		e.Server.Stop()
		e.Close()
		return fmt.Errorf("member %s did not serve within %v", name, readyTimeout)
	}
}

// serverLogger keeps etcd's own log to errors (level), on standard error: a test
// run stays readable, and a member that fails still says why.
func serverLogger(level zap.AtomicLevel) *zap.Logger {
	cfg := zap.NewProductionConfig()
	cfg.Level = level
	cfg.Sampling = nil
	lg, err := cfg.Build()
	if err != nil {
		return zap.NewNop()
	}
	return lg
}

// freePorts returns n loopback TCP ports that were free a moment ago.
func freePorts(n int) ([]int, error) {
	var ports []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("a free loopback port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// NewClient returns a new client on every member, with send and receive limits
// that let etcd's own MaxRequestBytes decide. The caller closes it.
func (s *Server) NewClient() (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{
		Endpoints:          s.Endpoints(),
		DialTimeout:        10 * time.Second,
		MaxCallSendMsgSize: MaxRequestBytes + grpcOverhead,
		MaxCallRecvMsgSize: 1 << 30,
		Logger:             zap.NewNop(),
	})
}

// Client is the server's own client; it stays open until the test ends.
func (s *Server) Client() *clientv3.Client { return s.client }

// Endpoints are the members' client URLs.
func (s *Server) Endpoints() []string {
	out := make([]string, len(s.members))
	for i, m := range s.members {
		out[i] = m.clientURL
	}
	return out
}

// Stop stops every member at once (a test of a store that lost its server). The
// client stays open, and its calls fail.
func (s *Server) Stop(t testing.TB) {
	t.Helper()
	for _, m := range s.members {
		m.close()
	}
}

// shutdown closes the client and every member, once.
func (s *Server) shutdown() {
	s.stop.Do(func() {
		if s.client != nil {
			s.client.Close()
		}
		for _, m := range s.members {
			m.close()
			if m.gate != nil {
				m.gate.close()
			}
		}
	})
}

// Ping checks that the members answer a linearizable read within d.
func (s *Server) Ping(d time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	_, err := s.client.Get(ctx, "etcdtest-ping")
	return err
}
