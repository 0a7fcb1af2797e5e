package redis_test

import (
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/internal/harness/redistest"
	"github.com/idkeeper/idkeeper/internal/harness/storetest"
	"github.com/idkeeper/idkeeper/redis"
)

// The contract holds on Redis Cluster through a cluster client: every script's
// keys, and every multi-key command, stay in the one slot of the hash tag. (One
// server for all of it: a cluster node takes two seconds to accept writes.)
func TestCluster(t *testing.T) {
	srv := redistest.Start(t, redistest.WithCluster())
	c := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: []string{srv.Addr()}})
	t.Cleanup(func() { c.Close() })

	t.Run("Contract", func(t *testing.T) {
		storetest.Run(t, func(t *testing.T, clock idkeeper.Clock) idkeeper.Store {
			return open(t, srv, redis.Options{Clock: clock, Client: c})
		})
	})

	t.Run("ServerCommands", func(t *testing.T) {
		s := open(t, srv, redis.Options{Client: c})
		if id, err := s.ReplicationID(t.Context()); err != nil || len(id) != 40 {
			t.Fatalf("ReplicationID = %q, %v", id, err)
		}
		if w := s.CheckConfig(t.Context()); len(w) != 1 {
			t.Fatalf("CheckConfig = %q, want the persistence warning", w)
		}
		if now, err := s.Now(t.Context()); err != nil || time.Since(now).Abs() > time.Minute {
			t.Fatalf("Now = %v, %v", now, err)
		}
		if safe, why, err := s.Durability(t.Context()); err != nil || safe || !strings.Contains(why, "persists nothing") {
			t.Fatalf("Durability = %v, %q, %v; want not safe, no persistence", safe, why, err)
		}
	})

	// WaitReplicas finds the primary of the slot; with no replica WAIT times out.
	t.Run("WaitReplicas", func(t *testing.T) {
		s := open(t, srv, redis.Options{Client: c, WaitReplicas: 1, WaitTimeout: 20 * time.Millisecond})
		g := initGuard(t, s, 2)
		if _, err := s.Alloc(t.Context(), g, allocP(who(1), 1, time.Minute)); err == nil {
			t.Fatal("Alloc waiting for a replica the cluster does not have succeeded")
		}
		if _, err := s.Reset(t.Context(), idkeeper.ResetParams{Pool: idkeeper.PoolSpec{Nodes: 2}, Until: t0}); err == nil {
			t.Fatal("Reset waiting for a replica the cluster does not have succeeded")
		}
	})
}
