package redis_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/internal/harness/fakeclock"
	"github.com/idkeeper/idkeeper/internal/harness/redistest"
	"github.com/idkeeper/idkeeper/protocol"
	"github.com/idkeeper/idkeeper/redis"
)

// replicate makes replica a replica of primary and waits until the link is up.
func replicate(t *testing.T, primary, replica *redistest.Server) {
	t.Helper()
	ctx := t.Context()
	c := rawClient(t, replica)
	host, port, _ := strings.Cut(primary.Addr(), ":")
	if err := c.Do(ctx, "REPLICAOF", host, port).Err(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		info, err := c.Info(ctx, "replication").Result()
		if err == nil && strings.Contains(info, "master_link_status:up") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica did not sync: %v %s", err, info)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestWaitReplicas(t *testing.T) {
	ctx := t.Context()
	primary, replica := redistest.Start(t), redistest.Start(t)
	replicate(t, primary, replica)

	s := open(t, primary, redis.Options{WaitReplicas: 1, WaitTimeout: 2 * time.Second})
	gd := initGuard(t, s, 4)
	// A flushed script cache takes the EVAL fallback inside the WAIT pipeline.
	if err := rawClient(t, primary).ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	g, err := s.Alloc(ctx, gd, allocP(who(1), 2, time.Minute))
	if err != nil {
		t.Fatalf("Alloc with one replica acknowledging: %v", err)
	}
	if _, err := s.Renew(ctx, gd, renewP(who(1), time.Hour)); err != nil {
		t.Fatalf("Renew with one replica acknowledging: %v", err)
	}
	if n, err := rawClient(t, replica).HLen(ctx, "{"+prefixOf(t, s)+"}:leases").Result(); err != nil || n != 2 {
		t.Fatalf("replica has %d leases (%v), want 2", n, err)
	}

	// Asking for more replicas than there are fails, but the write stands, and
	// Alloc is idempotent: a retry returns the same leases.
	s2 := open(t, primary, redis.Options{WaitReplicas: 2, WaitTimeout: 50 * time.Millisecond, Prefix: prefixOf(t, s)})
	if _, err := s2.Init(ctx, idkeeper.PoolSpec{Nodes: 4}); err != nil {
		t.Fatal(err)
	}
	_, err = s2.Alloc(ctx, gd, allocP(who(2), 1, time.Minute))
	if err == nil || !strings.Contains(err.Error(), "replicas") {
		t.Fatalf("Alloc waiting for 2 of 1 replicas = %v, want an acknowledgement error", err)
	}
	if protocol.ErrorCode(err) != protocol.CodeInternal {
		t.Fatalf("acknowledgement error %v is a domain error", err)
	}
	again, err := s.Alloc(ctx, gd, allocP(who(1), 2, time.Minute))
	if err != nil || again.Leases[0].FencingToken != g.Leases[0].FencingToken {
		t.Fatalf("retry = %+v, %v", again, err)
	}
	// Domain errors pass through unchanged.
	if _, err := s.Alloc(ctx, gd, allocP(who(1), 3, time.Minute)); protocol.ErrorCode(err) != protocol.CodeRequesterCountMismatch {
		t.Fatalf("mismatch under WaitReplicas = %v", err)
	}
}

// prefixOf finds the prefix a test store was opened with.
func prefixOf(t *testing.T, s *redis.Store) string {
	t.Helper()
	k := s.KeysForTest()[0]
	return k[1:strings.IndexByte(k, '}')]
}

// Reset waits for the replicas like a grant: a quarantine that a failover could
// lose is an error, not a silent success. With the replica up it succeeds, and the
// replica holds the raised quarantine, floor, fence and the new generation.
func TestWaitReplicasReset(t *testing.T) {
	ctx := t.Context()
	primary, replica := redistest.Start(t), redistest.Start(t)
	replicate(t, primary, replica)
	clk := fakeclock.New(t0)
	s := open(t, primary, redis.Options{Clock: clk.Now, WaitReplicas: 1, WaitTimeout: 2 * time.Second})
	res, err := s.Init(ctx, idkeeper.PoolSpec{Nodes: 4})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Alloc(ctx, idkeeper.Guard{Generation: res.Generation.ID}, allocP(who(1), 1, time.Minute)); err != nil {
		t.Fatal(err)
	}
	until := t0.Add(time.Hour)
	rr, err := s.Reset(ctx, idkeeper.ResetParams{Seen: res.Generation, Pool: idkeeper.PoolSpec{Nodes: 4}, Until: until, MinFence: 10})
	if err != nil || !rr.NewGeneration {
		t.Fatalf("Reset with the replica acknowledging = %+v, %v", rr, err)
	}
	tag := "{" + prefixOf(t, s) + "}:"
	raw := rawClient(t, replica)
	untilMs := fmt.Sprint(until.UnixMilli())
	for _, h := range []string{"quarantine", "floors"} {
		m, err := raw.HGetAll(ctx, tag+h).Result()
		if err != nil || len(m) != 4 {
			t.Fatalf("replica's %s = %v, %v; want 4 nodes", h, m, err)
		}
		for node, v := range m {
			if v != untilMs {
				t.Fatalf("replica's %s of node %s = %s, want %s", h, node, v, untilMs)
			}
		}
	}
	meta, err := raw.HGetAll(ctx, tag+"meta").Result()
	if err != nil || meta["gen"] != rr.Generation.ID || meta["fence"] != "10" {
		t.Fatalf("replica's meta = %v, %v; want generation %s and fence 10", meta, err, rr.Generation.ID)
	}

	replica.Stop(t)
	fast := open(t, primary, redis.Options{Clock: clk.Now, WaitReplicas: 1, WaitTimeout: 100 * time.Millisecond,
		Prefix: prefixOf(t, s)})
	_, err = fast.Reset(ctx, idkeeper.ResetParams{Seen: rr.Generation, Pool: idkeeper.PoolSpec{Nodes: 4}, Until: until.Add(time.Hour), MinFence: 10})
	if err == nil || !strings.Contains(err.Error(), "replicas") || protocol.ErrorCode(err) != protocol.CodeInternal {
		t.Fatalf("Reset with the replica stopped = %v, want a plain acknowledgement error", err)
	}
}
