package idkeeper_test

import (
	"context"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/internal/fakeclock"
	"github.com/idkeeper/idkeeper/internal/redistest"
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
	if idkeeper.ErrorCode(err) != idkeeper.CodeNodeIDsExhausted {
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

// A second replica on the same Redis adopts the recovery of the first instead of
// quarantining again.
func TestRedisResetRecoveredOnceAcrossReplicas(t *testing.T) {
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
	if want := t0.Add(48*time.Hour + 10*time.Minute); !ns.QuarantinedUntil.Equal(want) {
		t.Fatalf("quarantine until %v, want %v (set once, by the first replica)", ns.QuarantinedUntil, want)
	}
}
