package etcdtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// StartCluster starts a cluster of n members (3 for the failover tests) on
// loopback, every member in this test binary with its data in t.TempDir(), and
// returns it once every member serves, with a client on all of them. Kill stops
// one member as a crash would, and Restart starts it again on its data; Isolate
// cuts one off from its peers. The others carry on while they keep a quorum.
func StartCluster(t testing.TB, n int, o Options) *Server {
	t.Helper()
	if n < 1 {
		t.Fatalf("etcdtest: a cluster of %d members", n)
	}
	var errs []error
	for range startAttempts {
		s, err := startCluster(t.TempDir(), n, o)
		if err == nil {
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
	t.Fatalf("etcdtest: the embedded cluster did not start: %v", errors.Join(errs...))
	return nil
}

func startCluster(dir string, n int, o Options) (*Server, error) {
	ports, err := freePorts(2 * n)
	if err != nil {
		return nil, err
	}
	srv := &Server{isolated: map[string]bool{}}
	peers := make([]peer, n)
	gates := make([]*gate, n)
	closeGates := func() {
		for _, g := range gates {
			if g != nil {
				g.close()
			}
		}
	}
	for i := range n {
		// The gate's listener is opened here and kept: its port is what the
		// cluster knows the member by.
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			closeGates()
			return nil, fmt.Errorf("a gate's listener: %w", err)
		}
		listen := loopURL(ports[2*i+1])
		gates[i] = newGate(ln, listen.Host, srv.cut)
		peers[i] = peer{name: fmt.Sprintf("m%d", i), client: loopURL(ports[2*i]),
			peer: loopURL(ln.Addr().(*net.TCPAddr).Port), listenPeer: listen}
	}
	token := fmt.Sprintf("etcdtest-cluster-%d", ports[0])
	type started struct {
		e     *embed.Etcd
		level zap.AtomicLevel
	}
	es := make([]started, n)
	for i, p := range peers {
		e, level, err := launch(dir, p, peers, token, o, false)
		if err != nil {
			for _, s := range es[:i] {
				s.e.Close()
			}
			closeGates()
			return nil, err
		}
		es[i] = started{e, level}
	}
	// Every member waits for the quorum: they wait together.
	errc := make([]error, n)
	var wg sync.WaitGroup
	for i, s := range es {
		wg.Go(func() { errc[i] = awaitReady(s.e, s.level, peers[i].name) })
	}
	wg.Wait()
	if err := errors.Join(errc...); err != nil {
		for _, s := range es {
			s.e.Close()
		}
		closeGates()
		return nil, err
	}
	for i, s := range es {
		p := peers[i]
		m := &member{name: p.name, id: s.e.Server.MemberID().String(), etcd: s.e, clientURL: p.client.String(),
			logLevel: s.level, gate: gates[i],
			launch: func() (*embed.Etcd, zap.AtomicLevel, error) { return launch(dir, p, peers, token, o, true) }}
		gates[i].setMember(m.id)
		srv.members = append(srv.members, m)
	}
	return srv, nil
}

// cut tells a gate whether a peer connection from one member to another is
// refused: when either is isolated. from is "" for a request that names no
// sender, refused only when the receiver is isolated.
func (s *Server) cut(from, to string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.isolated[from] || s.isolated[to]
}

// Isolate cuts member i off from its peers, both ways, at once (its open peer
// connections are closed): a partition that leaves it alone. Its clients still
// reach it. A leader isolated so steps down once it misses its quorum's
// heartbeats; the others elect a new one. heal ends the partition.
func (s *Server) Isolate(i int) (heal func()) {
	id := s.members[i].id
	s.mu.Lock()
	s.isolated[id] = true
	s.mu.Unlock()
	for _, m := range s.members {
		m.gate.sever()
	}
	return func() {
		s.mu.Lock()
		delete(s.isolated, id)
		s.mu.Unlock()
	}
}

// Leader returns the index of the member that leads the cluster now, asking the
// members that answer; -1 when none knows one within d.
func (s *Server) Leader(d time.Duration) int {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	for ctx.Err() == nil {
		for _, m := range s.members {
			if m.killed() {
				continue
			}
			st, err := s.client.Status(ctx, m.clientURL)
			if err != nil || st.Leader == 0 {
				continue
			}
			for j, o := range s.members {
				if !o.killed() && uint64(o.etcd.Server.MemberID()) == st.Leader {
					return j
				}
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return -1
}

// Kill stops member i at once, as a crash would (its client connections drop;
// what it had committed stays with the quorum).
func (s *Server) Kill(i int) {
	m := s.members[i]
	m.close()
}

// Restart starts member i, killed before, again from its data directory, on its
// old ports, and waits until it has rejoined the cluster. Neither Restart nor Kill
// runs concurrently with another method of s.
func (s *Server) Restart(i int) error {
	m := s.members[i]
	if m.launch == nil || !m.killed() {
		return fmt.Errorf("etcdtest: member %s is not a killed member of a cluster", m.name)
	}
	e, level, err := m.launch()
	if err != nil {
		return err
	}
	if err := awaitReady(e, level, m.name); err != nil {
		return err
	}
	m.closeMu.Lock()
	m.etcd, m.logLevel, m.closed = e, level, false
	m.closeMu.Unlock()
	return nil
}

func (m *member) killed() bool {
	m.closeMu.Lock()
	defer m.closeMu.Unlock()
	if m.closed {
		return true
	}
	select {
	case <-m.etcd.Server.StopNotify():
		return true
	default:
		return false
	}
}
