package redis_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/idkeeper/idkeeper/internal/harness/redistest"
	"github.com/idkeeper/idkeeper/redis"
)

// otherReplID is a replication ID no server in these tests has.
var otherReplID = strings.Repeat("ab", 20)

// Every restart changes the replication ID; only appendfsync always vouches that
// the restarted server lost no acknowledged write.
func TestReplicationChangeSafeOnRestart(t *testing.T) {
	for _, c := range []struct {
		name string
		opts []redistest.Option
		safe bool
		why  string
	}{
		{"AOFAlways", []redistest.Option{redistest.WithAOF()}, true, "appendfsync always"},
		{"AOFEverySec", []redistest.Option{redistest.WithAOFEverySec()}, false, "appendfsync everysec"},
		{"NoPersistence", nil, false, "appendonly no"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := t.Context()
			srv := redistest.Start(t, c.opts...)
			s := open(t, srv, redis.Options{})
			g := initGuard(t, s, 4)
			if _, err := s.Alloc(ctx, g, allocP(who(1), 1, time.Minute)); err != nil {
				t.Fatal(err)
			}
			prev, err := s.ReplicationID(ctx)
			if err != nil {
				t.Fatal(err)
			}
			srv.Restart(t)
			cur, err := s.ReplicationID(ctx)
			if err != nil || cur == prev {
				t.Fatalf("ReplicationID after restart = %q, %v; want other than %q", cur, err, prev)
			}
			safe, why, err := s.ReplicationChangeSafe(ctx, prev)
			if err != nil || safe != c.safe || !strings.Contains(why, c.why) {
				t.Fatalf("ReplicationChangeSafe after restart = %v, %q, %v; want %v, mentioning %q", safe, why, err, c.safe, c.why)
			}
			if safe, why, err := s.ReplicationChangeSafe(ctx, cur); err != nil || !safe {
				t.Fatalf("ReplicationChangeSafe with the current ID = %v, %q, %v; want safe", safe, why, err)
			}
		})
	}
}

// A promoted replica vouches for the old data set only when every grant and
// renewal waited for a replica; its own append-only file does not help, since it
// holds only what the replica received.
func TestReplicationChangeSafeOnFailover(t *testing.T) {
	ctx := t.Context()
	primary, replica := redistest.Start(t), redistest.Start(t, redistest.WithAOF())
	replica.ReplicaOf(t, primary)

	s := open(t, primary, redis.Options{WaitReplicas: 1, WaitTimeout: 2 * time.Second})
	g := initGuard(t, s, 4)
	if _, err := s.Alloc(ctx, g, allocP(who(1), 2, time.Minute)); err != nil {
		t.Fatal(err)
	}
	prev, err := s.ReplicationID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	onReplica := func(wait int) *redis.Store {
		return open(t, replica, redis.Options{WaitReplicas: wait, Prefix: prefixOf(t, s)})
	}
	// Before the failover the replica is no master: it cannot vouch for a change.
	if safe, why, err := onReplica(1).ReplicationChangeSafe(ctx, otherReplID); err != nil || safe || !strings.Contains(why, "not a master") {
		t.Fatalf("ReplicationChangeSafe on a replica = %v, %q, %v; want not safe", safe, why, err)
	}

	replica.Promote(t)
	for _, c := range []struct {
		name string
		wait int
		prev string
		safe bool
		why  string
	}{
		{"WaitReplicas1", 1, prev, true, "acknowledged by 1 replica"},
		{"WaitReplicas0", 0, prev, false, "--redis-wait-replicas 0"},
		{"OtherDataSet", 1, otherReplID, false, "not of " + otherReplID},
	} {
		t.Run(c.name, func(t *testing.T) {
			promoted := onReplica(c.wait)
			safe, why, err := promoted.ReplicationChangeSafe(ctx, c.prev)
			if err != nil || safe != c.safe || !strings.Contains(why, c.why) {
				t.Fatalf("ReplicationChangeSafe after failover = %v, %q, %v; want %v, mentioning %q", safe, why, err, c.safe, c.why)
			}
		})
	}
	if c, err := onReplica(0).Counts(ctx); err != nil || c.Leased != 2 {
		t.Fatalf("promoted replica counts %+v, %v; want the 2 acknowledged leases", c, err)
	}
	// The old primary did not change.
	if safe, _, err := s.ReplicationChangeSafe(ctx, prev); err != nil || !safe {
		t.Fatalf("ReplicationChangeSafe on the old primary = %v, %v; want safe (unchanged)", safe, err)
	}
}

// CONFIG GET refused (a renamed or forbidden command) leaves the persistence
// unknown: no restart is vouched for. A connection error is an error, not a verdict.
func TestReplicationChangeSafeFailsClosed(t *testing.T) {
	ctx := t.Context()
	srv := redistest.Start(t, redistest.WithAOF())
	if err := rawClient(t, srv).Do(ctx, "ACL", "SETUSER", "noconfig", "on", ">pw", "~*", "&*", "+@all", "-config").Err(); err != nil {
		t.Fatal(err)
	}
	s, err := redis.Open(fmt.Sprintf("redis://noconfig:pw@%s/0", srv.Addr()), redis.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	safe, why, err := s.ReplicationChangeSafe(ctx, otherReplID)
	if err != nil || safe || !strings.Contains(why, "CONFIG GET") {
		t.Fatalf("ReplicationChangeSafe without CONFIG = %v, %q, %v; want not safe", safe, why, err)
	}

	srv.Stop(t)
	if safe, why, err := s.ReplicationChangeSafe(ctx, otherReplID); err == nil || safe {
		t.Fatalf("ReplicationChangeSafe with Redis down = %v, %q, %v; want an error", safe, why, err)
	}
}

// On a cluster, INFO and CONFIG go to the node that owns the store's slot.
func TestReplicationChangeSafeOnCluster(t *testing.T) {
	ctx := t.Context()
	srv := redistest.Start(t, redistest.WithCluster())
	c := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: []string{srv.Addr()}})
	t.Cleanup(func() { c.Close() })
	s := open(t, srv, redis.Options{Client: c})
	id, err := s.ReplicationID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if safe, why, err := s.ReplicationChangeSafe(ctx, id); err != nil || !safe {
		t.Fatalf("ReplicationChangeSafe unchanged = %v, %q, %v", safe, why, err)
	}
	if safe, why, err := s.ReplicationChangeSafe(ctx, otherReplID); err != nil || safe || !strings.Contains(why, "appendonly no") {
		t.Fatalf("ReplicationChangeSafe changed, no persistence = %v, %q, %v; want not safe", safe, why, err)
	}
}
