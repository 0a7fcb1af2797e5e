package etcdtest

import (
	"context"
	"errors"
	"fmt"
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
// one member as a crash would; the others carry on while they keep a quorum.
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
	peers := make([]peer, n)
	for i := range n {
		peers[i] = peer{name: fmt.Sprintf("m%d", i), client: loopURL(ports[2*i]), peer: loopURL(ports[2*i+1])}
	}
	token := fmt.Sprintf("etcdtest-cluster-%d", ports[0])
	type started struct {
		e     *embed.Etcd
		level zap.AtomicLevel
	}
	es := make([]started, n)
	for i, p := range peers {
		e, level, err := launch(dir, p, peers, token, o)
		if err != nil {
			for _, s := range es[:i] {
				s.e.Close()
			}
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
		return nil, err
	}
	srv := &Server{}
	for i, s := range es {
		srv.members = append(srv.members, &member{name: peers[i].name, etcd: s.e, clientURL: peers[i].client.String(), logLevel: s.level})
	}
	return srv, nil
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

func (m *member) killed() bool {
	select {
	case <-m.etcd.Server.StopNotify():
		return true
	default:
		return false
	}
}
