package idkeeper_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/internal/harness/fakeclock"
	"github.com/idkeeper/idkeeper/internal/harness/redistest"
	"github.com/idkeeper/idkeeper/protocol"
	"github.com/idkeeper/idkeeper/redis"
)

// A Redis restart without persistence loses every lease and watermark. The next
// mutating call must detect it and quarantine every node ID for lease + grace, with
// every watermark raised, before anything is granted again.
func TestRedisRestartWithoutPersistenceQuarantinesEverything(t *testing.T) {
	srv := redistest.Start(t)
	clk := fakeclock.New(t0)
	st, err := redis.Open(srv.URL(), redis.Options{Clock: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	e := openEnv(t, st, clk, idkeeper.Config{Nodes: 32})
	ctx := context.Background()

	before, err := e.reg.Alloc(ctx, idkeeper.AllocRequest{Requester: who(1), Count: 2})
	if err != nil {
		t.Fatal(err)
	}
	srv.Restart(t)

	_, err = e.reg.Alloc(ctx, idkeeper.AllocRequest{Requester: who(2), Count: 1})
	if protocol.ErrorCode(err) != protocol.CodeNodeIDsExhausted {
		t.Fatalf("alloc right after a reset: %v, want NODE_IDS_EXHAUSTED (everything quarantined)", err)
	}
	until := e.clk.Now().Add(48*time.Hour + 10*time.Minute)
	c, err := e.reg.Remaining(ctx)
	if err != nil || c.Quarantined != 32 || c.Remaining != 0 {
		t.Fatalf("counts after reset: %+v %v", c, err)
	}
	// The old holder learns it holds nothing.
	if g, err := e.reg.Renew(ctx, idkeeper.RenewRequest{Requester: who(1)}); err != nil || len(g.Leases) != 0 {
		t.Fatalf("renew by the forgotten holder: %+v %v", g, err)
	}
	if e.obs.resetCount(true) != 1 {
		t.Fatalf("store reset not reported: %v", e.obs.resets)
	}

	e.clk.Set(until.Add(time.Millisecond))
	after, err := e.reg.Alloc(ctx, idkeeper.AllocRequest{Requester: who(3), Count: 1})
	if err != nil {
		t.Fatal(err)
	}
	l := after.Leases[0]
	if !l.NotBefore.After(until) {
		t.Fatalf("new window starts %v, inside the forgotten holders' possible windows (until %v)", l.NotBefore, until)
	}
	if l.FencingToken <= before.Leases[1].FencingToken {
		t.Fatalf("fencing token %d went back (had handed out %d)", l.FencingToken, before.Leases[1].FencingToken)
	}
}

// A second replica on the same Redis finds the generation the first one wrote
// while recovering: whatever its origin, it recovers the store itself too (DESIGN
// §7), raising the quarantine to its own now + lease + grace, but keeps that
// generation, so the first sees no change and nothing ping-pongs.
func TestRedisResetRecoveredByEveryReplicaOneGeneration(t *testing.T) {
	srv := redistest.Start(t)
	clk := fakeclock.New(t0)
	open := func() idkeeper.Store {
		st, err := redis.Open(srv.URL(), redis.Options{Clock: clk.Now})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return st
	}
	a := openEnv(t, open(), clk, idkeeper.Config{Nodes: 8})
	b := openEnv(t, open(), clk, idkeeper.Config{Nodes: 8, Owner: "b"})
	ctx := context.Background()
	srv.Restart(t)
	if err := a.reg.CheckStore(ctx); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Hour)
	if err := b.reg.CheckStore(ctx); err != nil {
		t.Fatal(err)
	}
	if a.obs.resetCount(true) != 1 || b.obs.resetCount(false) != 1 || b.obs.resetCount(true) != 0 {
		t.Fatalf("a %v, b %v", a.obs.resets, b.obs.resets)
	}
	ns, _ := b.store.Node(ctx, 0)
	if want := t0.Add(time.Hour + 48*time.Hour + 10*time.Minute); !ns.QuarantinedUntil.Equal(want) || !ns.Floor.Equal(want) {
		t.Fatalf("node 0 = %+v, want quarantine and floor at %v (raised again by the second replica)", ns, want)
	}
	if ga, gb := a.reg.Generation(), b.reg.Generation(); ga.ID != gb.ID || ga.Number != 2 || gb.Number != 2 {
		t.Fatalf("generations a %+v, b %+v; want the one a wrote", a.reg.Generation(), b.reg.Generation())
	}
	for range 2 {
		if err := a.reg.CheckStore(ctx); err != nil {
			t.Fatal(err)
		}
		if err := b.reg.CheckStore(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if a.obs.resetsTotal() != 1 || b.obs.resetsTotal() != 1 {
		t.Fatalf("the replicas went on recovering: a %v, b %v", a.obs.resets, b.obs.resets)
	}
}

// Redis 7 gives a new replication ID on every restart, even with the append-only
// file. With appendfsync always nothing acknowledged can have been lost: the
// change is logged, not treated as a reset, and the pool stays allocatable.
func TestRedisRestartWithAOFAlwaysIsNoReset(t *testing.T) {
	srv := redistest.Start(t, redistest.WithAOF())
	e, st := openRedisEnv(t, srv, redis.Options{})
	ctx := context.Background()
	if _, err := e.reg.Alloc(ctx, idkeeper.AllocRequest{Requester: who(1), Count: 2}); err != nil {
		t.Fatal(err)
	}
	prev, _ := st.ReplicationID(ctx)
	srv.Restart(t)
	if cur, err := st.ReplicationID(ctx); err != nil || cur == prev {
		t.Fatalf("replication ID after restart = %q, %v; want a new one", cur, err)
	}

	if err := e.reg.CheckStore(ctx); err != nil {
		t.Fatal(err)
	}
	if e.obs.resetCount(true)+e.obs.resetCount(false) != 0 {
		t.Fatalf("a restart with appendfsync always was treated as a reset: %v", e.obs.resets)
	}
	if !strings.Contains(e.logs.String(), "replication ID changed; no acknowledged write can have been lost") {
		t.Fatalf("the change was not logged:\n%s", e.logs)
	}
	if _, err := e.reg.Alloc(ctx, idkeeper.AllocRequest{Requester: who(2), Count: 1}); err != nil {
		t.Fatalf("alloc right after the restart: %v", err)
	}
	if c, err := e.reg.Remaining(ctx); err != nil || c.Quarantined != 0 || c.Leased != 3 {
		t.Fatalf("counts after the restart: %+v %v; want nothing quarantined, 3 leased", c, err)
	}
	if g, err := e.reg.Renew(ctx, idkeeper.RenewRequest{Requester: who(1)}); err != nil || len(g.Leases) != 2 {
		t.Fatalf("renew after the restart: %+v %v", g, err)
	}
}

// appendfsync everysec keeps the data over a restart of the process, but a crash
// of the machine can lose the last second: the store cannot vouch for the change,
// so it is a reset (the generation survived; only the replication ID tells).
func TestRedisRestartWithAOFEverySecIsReset(t *testing.T) {
	srv := redistest.Start(t, redistest.WithAOFEverySec())
	e, _ := openRedisEnv(t, srv, redis.Options{})
	ctx := context.Background()
	if _, err := e.reg.Alloc(ctx, idkeeper.AllocRequest{Requester: who(1), Count: 2}); err != nil {
		t.Fatal(err)
	}
	srv.Restart(t)

	if err := e.reg.CheckStore(ctx); err != nil {
		t.Fatal(err)
	}
	if e.obs.resetCount(true) != 1 {
		t.Fatalf("store reset not reported: %v", e.obs.resets)
	}
	if !strings.Contains(e.logs.String(), "appendfsync everysec") {
		t.Fatalf("the reset's reason does not name the setting:\n%s", e.logs)
	}
	if c, err := e.reg.Remaining(ctx); err != nil || c.Quarantined != 30 || c.Remaining != 0 || c.Leased != 2 {
		t.Fatalf("counts after the reset: %+v %v; want every free node ID quarantined", c, err)
	}
	// Held leases keep working.
	if g, err := e.reg.Renew(ctx, idkeeper.RenewRequest{Requester: who(1)}); err != nil || len(g.Leases) != 2 {
		t.Fatalf("renew after the reset: %+v %v", g, err)
	}
	// Checking again finds nothing new.
	if err := e.reg.CheckStore(ctx); err != nil || e.obs.resetCount(true) != 1 {
		t.Fatalf("second check: %v, resets %v", err, e.obs.resets)
	}
}

// A failover to a replica: the registry keeps its one Store, whose client dials
// wherever the test points it, as a Sentinel-aware client would. With every grant
// and renewal acknowledged by the replica (WaitReplicas 1) the promotion lost
// nothing; without, it is a reset.
func TestRedisFailover(t *testing.T) {
	for _, c := range []struct {
		name  string
		wait  int
		reset bool
	}{
		{"WaitReplicas1", 1, false},
		{"WaitReplicas0", 0, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			primary, replica := redistest.Start(t), redistest.Start(t)
			replica.ReplicaOf(t, primary)
			var addr atomic.Pointer[string]
			a := primary.Addr()
			addr.Store(&a)
			client := goredis.NewClient(&goredis.Options{
				Addr: primary.Addr(),
				Dialer: func(ctx context.Context, network, _ string) (net.Conn, error) {
					var d net.Dialer
					return d.DialContext(ctx, network, *addr.Load())
				},
			})
			t.Cleanup(func() { client.Close() })
			e, _ := openRedisEnv(t, primary, redis.Options{Client: client, WaitReplicas: c.wait, WaitTimeout: 2 * time.Second})
			ctx := context.Background()
			if _, err := e.reg.Alloc(ctx, idkeeper.AllocRequest{Requester: who(1), Count: 2}); err != nil {
				t.Fatal(err)
			}
			if n, err := client.Do(ctx, "WAIT", 1, 5000).Int(); err != nil || n != 1 {
				t.Fatalf("WAIT = %d, %v", n, err) // the replica has the grant either way
			}

			replica.Promote(t)
			primary.Stop(t)
			b := replica.Addr()
			addr.Store(&b)
			if err := client.Ping(ctx).Err(); err != nil { // drops the dead connections
				if err := client.Ping(ctx).Err(); err != nil {
					t.Fatal(err)
				}
			}

			if err := e.reg.CheckStore(ctx); err != nil {
				t.Fatal(err)
			}
			cnt, err := e.reg.Remaining(ctx)
			if err != nil || cnt.Leased != 2 {
				t.Fatalf("counts after failover: %+v %v; want the 2 leases", cnt, err)
			}
			if !c.reset {
				if e.obs.resetCount(true)+e.obs.resetCount(false) != 0 || cnt.Quarantined != 0 {
					t.Fatalf("failover with replica acknowledgement was a reset: %v, %+v", e.obs.resets, cnt)
				}
				if !strings.Contains(e.logs.String(), "no acknowledged write can have been lost") {
					t.Fatalf("the change was not logged:\n%s", e.logs)
				}
				return
			}
			if e.obs.resetCount(true) != 1 || cnt.Quarantined != 30 {
				t.Fatalf("failover without replica acknowledgement: resets %v, counts %+v; want a reset", e.obs.resets, cnt)
			}
			if !strings.Contains(e.logs.String(), "--redis-wait-replicas 0") {
				t.Fatalf("the reset's reason does not name --redis-wait-replicas:\n%s", e.logs)
			}
		})
	}
}

// openRedisEnv opens a registry of 32 node IDs over a Redis store on srv (or on
// opts.Client) with a fake clock.
func openRedisEnv(t *testing.T, srv *redistest.Server, opts redis.Options) (*env, *redis.Store) {
	t.Helper()
	clk := fakeclock.New(t0)
	opts.Clock = clk.Now
	st, err := redis.Open(srv.URL(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return openEnv(t, st, clk, idkeeper.Config{Nodes: 32}), st
}

// flakyReplication fails ReplicationChangeSafe while fail is set, as a Redis that
// stops answering between INFO calls.
type flakyReplication struct {
	*redis.Store
	fail atomic.Bool
}

func (f *flakyReplication) ReplicationChangeSafe(ctx context.Context, prev string) (bool, string, error) {
	if f.fail.Load() {
		return false, "", errors.New("connection refused")
	}
	return f.Store.ReplicationChangeSafe(ctx, prev)
}

// A change that could not be judged is not adopted: the next check judges it again.
func TestRedisReplicationChangeRecheckedAfterFailure(t *testing.T) {
	srv := redistest.Start(t, redistest.WithAOFEverySec())
	clk := fakeclock.New(t0)
	st, err := redis.Open(srv.URL(), redis.Options{Clock: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	f := &flakyReplication{Store: st}
	e := openEnv(t, f, clk, idkeeper.Config{Nodes: 8})
	ctx := context.Background()
	srv.Restart(t)

	f.fail.Store(true)
	if err := e.reg.CheckStore(ctx); protocol.ErrorCode(err) != protocol.CodeStoreUnavailable {
		t.Fatalf("check with the judgement failing = %v, want STORE_UNAVAILABLE", err)
	}
	if e.obs.resetCount(true) != 0 {
		t.Fatalf("reset without a judgement: %v", e.obs.resets)
	}
	f.fail.Store(false)
	if err := e.reg.CheckStore(ctx); err != nil {
		t.Fatal(err)
	}
	if e.obs.resetCount(true) != 1 {
		t.Fatalf("the change was forgotten after a failed check: resets %v", e.obs.resets)
	}
}

// Issue #8 item 6: the same as TestRedisRestartWithAOFEverySecIsReset, but the
// registry restarts too (a host reboot): what it compares against (the replication
// ID, the highest token) comes from its state, so the loss is still caught, at
// Open, before any grant.
func TestRedisRestartDuringARegistryRestartIsReset(t *testing.T) {
	srv := redistest.Start(t, redistest.WithAOFEverySec())
	clk := fakeclock.New(t0)
	state := &idkeeper.MemoryState{}
	open := func() *redis.Store {
		st, err := redis.Open(srv.URL(), redis.Options{Clock: clk.Now})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return st
	}
	cfg := idkeeper.Config{Nodes: 32, State: state}
	e := openEnv(t, open(), clk, cfg)
	ctx := context.Background()
	g, err := e.reg.Alloc(ctx, idkeeper.AllocRequest{Requester: who(1), Count: 2})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.reg.Close(); err != nil {
		t.Fatal(err)
	}
	srv.Restart(t) // while the registry is down

	again := startEnv(t, open(), clk, cfg)
	if again.obs.resetCount(true) != 1 || again.reg.Phase() != idkeeper.PhaseReady {
		t.Fatalf("the restarted registry: resets %v, phase %s", again.obs.resets, again.reg.Phase())
	}
	if !strings.Contains(again.logs.String(), "appendfsync everysec") {
		t.Fatalf("the reset's reason does not name the setting:\n%s", again.logs)
	}
	if c, err := again.reg.Remaining(ctx); err != nil || c.Quarantined != 30 || c.Leased != 2 {
		t.Fatalf("counts after the restart: %+v %v", c, err)
	}
	if rg, err := again.reg.Renew(ctx, idkeeper.RenewRequest{Requester: who(1), Receipts: receipts(g)}); err != nil || len(rg.Leases) != 2 {
		t.Fatalf("renew after the restart: %+v %v", rg, err)
	}
}

// Issue #8 item 7: a reset's quarantine is acknowledged by replicas like a grant.
// With the replica down the recovery fails (and the registry stays recovering:
// 503, no grant) instead of writing a quarantine a failover would forget; once the
// replica is back it completes and the replica has it.
func TestRedisResetIsAcknowledgedByReplicas(t *testing.T) {
	primary, replica := redistest.Start(t), redistest.Start(t)
	replica.ReplicaOf(t, primary)
	e, _ := openRedisEnv(t, primary, redis.Options{WaitReplicas: 1, WaitTimeout: 2 * time.Second})
	ctx := context.Background()
	if _, err := e.reg.Alloc(ctx, idkeeper.AllocRequest{Requester: who(1), Count: 2}); err != nil {
		t.Fatal(err)
	}
	replica.Stop(t)
	rdb := goredis.NewClient(&goredis.Options{Addr: primary.Addr()})
	t.Cleanup(func() { rdb.Close() })
	if err := rdb.FlushAll(ctx).Err(); err != nil { // the store loses its data
		t.Fatal(err)
	}
	_, err := e.reg.Alloc(ctx, idkeeper.AllocRequest{Requester: who(2), Count: 1})
	if protocol.ErrorCode(err) != protocol.CodeStoreRecovering {
		t.Fatalf("alloc while the reset cannot be acknowledged: %v, want STORE_RECOVERING", err)
	}
	if e.reg.Phase() != idkeeper.PhaseRecovering || e.obs.resetsTotal() != 0 {
		t.Fatalf("phase %s, resets %v", e.reg.Phase(), e.obs.resets)
	}
	if err := e.reg.Serving(); protocol.ErrorCode(err) != protocol.CodeStoreRecovering {
		t.Fatalf("serving while recovering: %v", err)
	}

	replica.Restart(t)
	replica.ReplicaOf(t, primary)
	if err := e.reg.CheckStore(ctx); err != nil {
		t.Fatal(err)
	}
	// The failed attempt wrote its generation on the primary before WAIT failed; the
	// acknowledged one raises everything again and adopts it.
	if e.reg.Phase() != idkeeper.PhaseReady || e.obs.resetsTotal() != 1 {
		t.Fatalf("after the replica came back: phase %s, resets %v", e.reg.Phase(), e.obs.resets)
	}
	ro := goredis.NewClient(&goredis.Options{Addr: replica.Addr()})
	t.Cleanup(func() { ro.Close() })
	st, err := redis.Open("", redis.Options{Client: ro})
	if err != nil {
		t.Fatal(err)
	}
	if s, err := st.Status(ctx); err != nil || s.Generation.ID != e.reg.Generation().ID {
		t.Fatalf("the replica's generation: %+v %v, want %s", s, err, e.reg.Generation().ID)
	}
	if ns, err := st.Node(ctx, 5); err != nil || !ns.QuarantinedUntil.Equal(t0.Add(48*time.Hour+10*time.Minute)) {
		t.Fatalf("the replica's node 5: %+v %v", ns, err)
	}
}
