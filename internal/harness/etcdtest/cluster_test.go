package etcdtest_test

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/idkeeper/idkeeper/internal/harness/etcdtest"
)

func memberClient(t *testing.T, s *etcdtest.Server, i int) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: s.Endpoints()[i : i+1], DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func put(c *clientv3.Client, k, v string, d time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	_, err := c.Put(ctx, k, v)
	return err
}

// An isolated leader loses the lead: the other two elect one of themselves and
// commit without it; the isolated member commits nothing meanwhile, and once healed
// it catches up.
func TestIsolateLeader(t *testing.T) {
	s := etcdtest.StartCluster(t, 3, etcdtest.Options{})
	old := s.Leader(10 * time.Second)
	if old < 0 {
		t.Fatal("no leader")
	}
	alone := memberClient(t, s, old)
	t0 := time.Now()
	heal := s.Isolate(old)
	if err := put(alone, "k", "isolated", 3*time.Second); err == nil {
		t.Fatal("a write through the isolated member committed")
	}
	var other *clientv3.Client
	for i := range 3 {
		if i != old {
			other = memberClient(t, s, i)
			break
		}
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := put(other, "k", "majority", 2*time.Second)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the majority did not commit while the leader was isolated: %v", err)
		}
	}
	if l := s.Leader(10 * time.Second); l == old || l < 0 {
		// The isolated member may still call itself leader for a moment; the
		// majority's write above proves it is not one.
		t.Logf("leader reported as %d (old %d)", l, old)
	}
	t.Logf("majority committed after %v", time.Since(t0))
	heal()
	t1 := time.Now()
	deadline = time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		resp, err := alone.Get(ctx, "k")
		cancel()
		if err == nil && len(resp.Kvs) == 1 && string(resp.Kvs[0].Value) == "majority" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the healed member reads %v, %v; want the majority's write", resp, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("caught up %v after the heal", time.Since(t1))
}

// A killed member restarts from its data directory and catches up with what was
// committed while it was down.
func TestKillRestart(t *testing.T) {
	s := etcdtest.StartCluster(t, 3, etcdtest.Options{})
	victim := (s.Leader(10*time.Second) + 1) % 3
	s.Kill(victim)
	if err := s.Restart((victim + 1) % 3); err == nil {
		t.Fatal("Restart of a running member succeeded")
	}
	if err := put(s.Client(), "k", "while-down", 10*time.Second); err != nil {
		t.Fatalf("the quorum of two: %v", err)
	}
	t0 := time.Now()
	if err := s.Restart(victim); err != nil {
		t.Fatal(err)
	}
	t.Logf("restarted in %v", time.Since(t0))
	c := memberClient(t, s, victim)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := c.Get(ctx, "k")
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "while-down" {
		t.Fatalf("the restarted member reads %v, %v", resp, err)
	}
}
