package idkeeper_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/protocol"
)

// checkedClock is a ClockVerifier whose verdict the test sets.
type checkedClock struct {
	mu  sync.Mutex
	err error
}

func (c *checkedClock) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

func (c *checkedClock) fail(err error) {
	c.mu.Lock()
	c.err = err
	c.mu.Unlock()
}

func TestClockDeltaRange(t *testing.T) {
	for _, c := range []struct {
		v     idkeeper.ClockVerifier
		delta time.Duration
		ok    bool
	}{
		{nil, 0, true},
		{nil, time.Second, false},
		{&checkedClock{}, 0, false},
		{&checkedClock{}, time.Millisecond, false},
		{&checkedClock{}, 2 * time.Millisecond, true},
		{&checkedClock{}, time.Minute, true},
		{&checkedClock{}, time.Minute + time.Millisecond, false},
	} {
		_, err := idkeeper.NewRegistry(nil, idkeeper.Config{ClockVerifier: c.v, ClockDelta: c.delta})
		var re *idkeeper.RangeError
		if c.ok != (err == nil) || !c.ok && (!errors.As(err, &re) || re.Setting != "clock-delta") {
			t.Errorf("verifier %v, Δ %v: %v", c.v != nil, c.delta, err)
		}
	}
}

// Once the clock check fails the replica fails closed: no Alloc, no Renew, no
// cleanup, not ready, its job locks released, an audit entry; Remove still
// releases what a holder gives back.
func TestClockUnverifiedFailsClosed(t *testing.T) {
	ctx := context.Background()
	clock := &checkedClock{}
	e := newEnv(t, idkeeper.Config{ClockVerifier: clock, ClockDelta: time.Second, Nodes: 8, Owner: "replica-a"})
	w := idkeeper.Requester{MachineID: "m", PID: 1, StartedAt: t0, Instance: "a"}
	if _, err := e.reg.Alloc(ctx, idkeeper.AllocRequest{Requester: w, Count: 2}); err != nil {
		t.Fatal(err)
	}
	if _, ran, err := e.reg.Cleanup(ctx); !ran || err != nil {
		t.Fatalf("cleanup: %v %v", ran, err)
	}
	if _, ok, err := e.store.TryLock(ctx, "someone-elses", "replica-b", time.Hour); !ok || err != nil {
		t.Fatal(err)
	}

	failure := errors.New("clock agent: mac mismatch")
	clock.fail(failure)
	code := func(err error) idkeeper.Code { return protocol.ErrorCode(err) }
	if _, err := e.reg.Alloc(ctx, idkeeper.AllocRequest{Requester: idkeeper.Requester{MachineID: "n", PID: 2, StartedAt: t0}, Count: 1}); code(err) != protocol.CodeClockUnverified {
		t.Errorf("Alloc: %v", err)
	}
	if _, err := e.reg.Renew(ctx, idkeeper.RenewRequest{Requester: w}); code(err) != protocol.CodeClockUnverified {
		t.Errorf("Renew: %v", err)
	}
	if _, ran, err := e.reg.Cleanup(ctx); ran || code(err) != protocol.CodeClockUnverified {
		t.Errorf("Cleanup: ran %v, %v", ran, err)
	}
	if err := e.reg.Ready(ctx); code(err) != protocol.CodeClockUnverified || !errors.Is(err, failure) {
		t.Errorf("Ready: %v", err)
	}

	e.reg.ClockFailed(ctx, failure)
	locks, err := e.store.Locks(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(locks) != 1 || locks[0].Name != "someone-elses" {
		t.Errorf("locks after ClockFailed: %+v, want only another replica's", locks)
	}
	if !strings.Contains(e.logs.String(), "the clock check failed") {
		t.Errorf("no log line:\n%s", e.logs.String())
	}
	if n, err := e.reg.Remove(ctx, idkeeper.RemoveRequest{Requester: w}); n != 2 || err != nil {
		t.Errorf("Remove while unverified: %d, %v", n, err)
	}
}

// Cleanup reclaims a lease Grace + Δ past its expiry, not Grace alone: Δ is
// added once, at reclaim.
func TestClockDeltaAddedAtReclaim(t *testing.T) {
	ctx := context.Background()
	const grace, delta = 10 * time.Minute, 30 * time.Second
	e := newEnv(t, idkeeper.Config{ClockVerifier: &checkedClock{}, ClockDelta: delta, Grace: grace, Nodes: 4})
	w := idkeeper.Requester{MachineID: "m", PID: 1, StartedAt: t0, Instance: "a"}
	g, err := e.reg.Alloc(ctx, idkeeper.AllocRequest{Requester: w, Count: 1})
	if err != nil {
		t.Fatal(err)
	}
	expiry := g.Leases[0].ExpiresAt
	e.clk.Set(expiry.Add(grace + delta - time.Millisecond))
	if n, ran, err := e.reg.Cleanup(ctx); n != 0 || !ran || err != nil {
		t.Fatalf("cleanup just before expiry + grace + Δ: reclaimed %d, ran %v, %v", n, ran, err)
	}
	// Past the job lock's lock-at-least-for (9/10 of the test's hourly interval).
	e.clk.Set(expiry.Add(grace + delta + time.Hour))
	if n, ran, err := e.reg.Cleanup(ctx); n != 1 || !ran || err != nil {
		t.Fatalf("cleanup after expiry + grace + Δ: reclaimed %d, ran %v, %v", n, ran, err)
	}
}

// transientErr is a verifier error that may clear by itself.
type transientErr struct{ error }

func (transientErr) Transient() bool { return true }

// A verifier error that may clear (the store's clock unreadable during a
// failover) still refuses, but does not tell the operator to restart; it clears
// when the verifier does.
func TestClockUnverifiedTransient(t *testing.T) {
	ctx := context.Background()
	clock := &checkedClock{}
	e := newEnv(t, idkeeper.Config{ClockVerifier: clock, ClockDelta: time.Second, Nodes: 8})
	w := idkeeper.Requester{MachineID: "m", PID: 1, StartedAt: t0}
	clock.fail(transientErr{errors.New("read the store's clock: i/o timeout")})
	_, err := e.reg.Alloc(ctx, idkeeper.AllocRequest{Requester: w, Count: 1})
	var ie *idkeeper.Error
	if !errors.As(err, &ie) || ie.Code != protocol.CodeClockUnverified || strings.Contains(ie.Message, "restarted") ||
		!strings.Contains(ie.Message, "verifies it again") {
		t.Fatalf("Alloc while the store clock is unverified: %#v", err)
	}
	clock.fail(errors.New("mac mismatch"))
	if _, err := e.reg.Alloc(ctx, idkeeper.AllocRequest{Requester: w, Count: 1}); !errors.As(err, &ie) || !strings.Contains(ie.Message, "restarted") {
		t.Fatalf("Alloc after a latched failure: %#v", err)
	}
	clock.fail(nil)
	if _, err := e.reg.Alloc(ctx, idkeeper.AllocRequest{Requester: w, Count: 1}); err != nil {
		t.Fatalf("Alloc once verified again: %v", err)
	}
}

// ReleaseJobLocks hands back every lock of this replica at once, one kept past
// its job by lock-at-least-for included, and leaves another replica's alone: a
// replica whose clock check failed calls it on its way out (issue #29).
func TestReleaseJobLocks(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, idkeeper.Config{ClockVerifier: &checkedClock{}, ClockDelta: time.Second, Nodes: 8, Owner: "replica-a"})
	for _, l := range []struct{ name, owner string }{{"job-b", "replica-a"}, {"job-a", "replica-a"}, {"other", "replica-b"}} {
		if _, ok, err := e.store.TryLock(ctx, l.name, l.owner, time.Hour); !ok || err != nil {
			t.Fatalf("TryLock %s: %v %v", l.name, ok, err)
		}
	}
	// job-a ran and is kept for an hour, as the audit retention job keeps its lock.
	if held, err := e.store.Unlock(ctx, "job-a", "replica-a", time.Hour); !held || err != nil {
		t.Fatalf("Unlock: %v %v", held, err)
	}
	released, err := e.reg.ReleaseJobLocks(ctx)
	if err != nil || strings.Join(released, ",") != "job-a,job-b" {
		t.Fatalf("released %v, %v; want job-a and job-b", released, err)
	}
	locks, err := e.store.Locks(ctx)
	if err != nil || len(locks) != 1 || locks[0].Name != "other" || locks[0].Owner != "replica-b" {
		t.Fatalf("locks left: %+v %v; want only replica-b's", locks, err)
	}
	if released, err := e.reg.ReleaseJobLocks(ctx); len(released) != 0 || err != nil {
		t.Errorf("a second call released %v, %v", released, err)
	}
}
