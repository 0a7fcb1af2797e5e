package idkeeper_test

import (
	"context"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper"
)

// TestRestartReleasesThePredecessorsLocks: a replica killed while it held the
// cleanup lock (taken just before, lock-at-most-for a minute) would stall cleanup
// on every replica until the lock lapses. The process that starts next on the same
// replica state releases the locks its predecessor held — and only those — and
// cleanup runs again at once. Found by the chaos scenario kill-lock-holder: a
// newcomer waited a minute for a node ID only a cleanup could free.
func TestRestartReleasesThePredecessorsLocks(t *testing.T) {
	state := &idkeeper.MemoryState{}
	first := newEnv(t, idkeeper.Config{Nodes: 8, Owner: "host:100:aaaa", State: state})
	ctx := context.Background()
	if _, ok, err := first.store.TryLock(ctx, idkeeper.CleanupJob, "host:100:aaaa", time.Minute); err != nil || !ok {
		t.Fatalf("take the cleanup lock: %v %v", ok, err)
	}
	if _, ok, err := first.store.TryLock(ctx, "other-job", "another-replica", time.Minute); err != nil || !ok {
		t.Fatalf("take another replica's lock: %v %v", ok, err)
	}
	// An event lock marks an alert as sent for its period: it outlives the process.
	if _, ok, err := first.store.TryLock(ctx, "alert:store-reset:x", "host:100:aaaa", 10*time.Minute); err != nil || !ok {
		t.Fatalf("take an event lock: %v %v", ok, err)
	}
	// The process dies holding the lock; the next one starts on its state.
	next := startEnv(t, first.store, first.clk, idkeeper.Config{Nodes: 8, Owner: "host:200:bbbb", State: state})
	locks, err := next.store.Locks(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(locks) != 2 || locks[0].Name != "alert:store-reset:x" || locks[1].Owner != "another-replica" {
		t.Fatalf("locks after the restart: %+v; want the event lock and another-replica's", locks)
	}
	if _, ran, err := next.reg.Cleanup(ctx); err != nil || !ran {
		t.Fatalf("cleanup after the restart: ran %v, %v", ran, err)
	}
	// A process on a state of its own releases nothing.
	if _, ok, err := first.store.TryLock(ctx, "third-job", "host:200:bbbb", time.Minute); err != nil || !ok {
		t.Fatalf("take a lock: %v %v", ok, err)
	}
	startEnv(t, first.store, first.clk, idkeeper.Config{Nodes: 8, Owner: "host:300:cccc"})
	if locks, err := next.store.Locks(ctx); err != nil || len(locks) != 4 {
		t.Fatalf("a process on another state released locks: %+v %v", locks, err)
	}
}
