package idkeeper_test

import (
	"context"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/bolt"
	"github.com/idkeeper/idkeeper/internal/harness/fakeclock"
)

// heldRenew is a Store whose Renew, once armed, stops after the store answered and
// before the registry sees the answer, until released.
type heldRenew struct {
	idkeeper.Store
	armed           bool
	answered, leave chan struct{}
}

func (h *heldRenew) Renew(ctx context.Context, gd idkeeper.Guard, p idkeeper.RenewParams) (idkeeper.Grant, error) {
	g, err := h.Store.Renew(ctx, gd, p)
	if h.armed {
		close(h.answered)
		<-h.leave
	}
	return g, err
}

// A Renew that read the fencing counter before a concurrent Alloc of the same
// replica handed out a higher token is no store reset. (The chaos suite found this:
// every burst of concurrent Allocs and Renews quarantined the whole pool.)
func TestConcurrentGrantIsNoFenceRegression(t *testing.T) {
	clk := fakeclock.New(t0)
	st, err := bolt.Open(filepath.Join(t.TempDir(), "idk.db"), bolt.Options{Clock: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	h := &heldRenew{Store: st, answered: make(chan struct{}), leave: make(chan struct{})}
	e := openEnv(t, h, clk, idkeeper.Config{Nodes: 16})
	ctx := context.Background()
	g1, err := e.reg.Alloc(ctx, idkeeper.AllocRequest{Requester: who(1), Count: 1})
	if err != nil {
		t.Fatal(err)
	}
	h.armed = true
	done := make(chan error, 1)
	go func() {
		_, err := e.reg.Renew(ctx, idkeeper.RenewRequest{Requester: who(1), Receipts: receipts(g1)})
		done <- err
	}()
	<-h.answered
	h.armed = false
	if _, err := e.reg.Alloc(ctx, idkeeper.AllocRequest{Requester: who(2), Count: 1}); err != nil {
		t.Fatal(err)
	}
	close(h.leave)
	if err := <-done; err != nil {
		t.Fatalf("renew: %v", err)
	}
	if n := e.obs.resetCount(true) + e.obs.resetCount(false); n != 0 {
		t.Fatalf("%d store resets detected for a renew that raced an alloc", n)
	}
	if c, _ := e.reg.Remaining(ctx); c.Quarantined != 0 {
		t.Fatalf("pool quarantined: %+v", c)
	}
}

// heldStatus is a Store whose Status, once armed, stops after the store answered
// and before the registry compares the answer, until released.
type heldStatus struct {
	idkeeper.Store
	armed           atomic.Bool
	answered, leave chan struct{}
}

func (h *heldStatus) Status(ctx context.Context) (idkeeper.StoreStatus, error) {
	st, err := h.Store.Status(ctx)
	if h.armed.CompareAndSwap(true, false) {
		close(h.answered)
		<-h.leave
	}
	return st, err
}

// The store probe read the fencing counter, then compared it with the highest token
// known after a concurrent Alloc had raised it: a false reset that quarantined the
// pool (seen by the chaos suite under contention, with the 1 s probe of its short
// leases). What the probe compares with is now taken before it reads the store.
func TestConcurrentGrantIsNoFenceRegressionForTheProbe(t *testing.T) {
	clk := fakeclock.New(t0)
	st, err := bolt.Open(filepath.Join(t.TempDir(), "idk.db"), bolt.Options{Clock: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	h := &heldStatus{Store: st, answered: make(chan struct{}), leave: make(chan struct{})}
	e := openEnv(t, h, clk, idkeeper.Config{Nodes: 16})
	ctx := context.Background()
	if _, err := e.reg.Alloc(ctx, idkeeper.AllocRequest{Requester: who(1), Count: 1}); err != nil {
		t.Fatal(err)
	}
	h.armed.Store(true)
	done := make(chan error, 1)
	go func() { done <- e.reg.CheckStore(ctx) }()
	<-h.answered
	if _, err := e.reg.Alloc(ctx, idkeeper.AllocRequest{Requester: who(2), Count: 1}); err != nil {
		t.Fatal(err)
	}
	close(h.leave)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := e.obs.resetsTotal(); n != 0 {
		t.Fatalf("%d store resets for a probe that raced an alloc", n)
	}
}
