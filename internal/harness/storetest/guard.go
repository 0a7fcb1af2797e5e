package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper"
)

// guarded calls every guarded method with g, each of which must fail with an error
// that is want; the store must not change.
func (e *env) guarded(what string, g idkeeper.Guard, want error) {
	e.t.Helper()
	snap := e.snapshot()
	leases := e.leases()
	check := func(op string, err error) {
		e.t.Helper()
		if !errors.Is(err, want) {
			e.t.Fatalf("%s with %s: err = %v, want %v", op, what, err, want)
		}
	}
	_, err := e.s.Alloc(e.ctx, g, idkeeper.AllocParams{Requester: req(7), KeyID: keyA, Count: 1, First: time.Minute})
	check("Alloc", err)
	_, err = e.s.Alloc(e.ctx, g, idkeeper.AllocParams{Requester: req(1), KeyID: keyA, Count: 1, First: time.Hour})
	check("repeated Alloc", err)
	_, err = e.s.Renew(e.ctx, g, idkeeper.RenewParams{Requester: req(1), KeyID: keyA, Duration: 48 * time.Hour})
	check("Renew", err)
	_, err = e.s.Remove(e.ctx, g, idkeeper.RemoveParams{Requester: req(1), KeyID: keyA, MintedUpTo: e.now()})
	check("Remove", err)
	_, err = e.s.Reclaim(e.ctx, g, 0)
	check("Reclaim", err)
	check("Quarantine", e.s.Quarantine(e.ctx, g, e.now().Add(time.Hour), 0, 1))
	check("Grow", e.s.Grow(e.ctx, g, poolOf(e.nodes+1)))
	e.wantUnchanged(what, snap)
	wantSameLeases(e.t, what, e.leases(), leases)
}

// testGuardGeneration: a guard naming another generation, or none, is refused.
func testGuardGeneration(t *testing.T, open Factory) {
	e := setup(t, open, 4)
	e.alloc(req(1), 1, 10*time.Minute)
	e.advance(time.Hour) // the lease is due for Reclaim
	for _, gen := range []string{"", "another", e.gen.ID + "x"} {
		g := e.guard()
		g.Generation = gen
		e.guarded("generation "+gen, g, idkeeper.ErrGenerationChanged)
		e.guarded("generation "+gen, g, idkeeper.ErrStoreReset)
	}
}

// testGuardFence: a guard whose MinFence is above the counter shows lost writes and
// is refused; MinFence equal to the counter is fine, and the next token is above it
// (DESIGN §3: strictly greater than every token issued before).
func testGuardFence(t *testing.T, open Factory) {
	e := setup(t, open, 4)
	e.alloc(req(1), 2, 10*time.Minute)
	e.advance(time.Hour)
	for _, over := range []uint64{1, 1000, idkeeper.MaxFencingToken} {
		g := e.guard()
		g.MinFence = e.fence + over
		e.guarded("a token above the counter", g, idkeeper.ErrFenceRegression)
		e.guarded("a token above the counter", g, idkeeper.ErrStoreReset)
	}
	g := e.alloc(req(2), 1, 10*time.Minute) // guard MinFence = e.fence, the counter
	if g.Leases[0].FencingToken != 3 {
		t.Fatalf("token after MinFence 2 = %d, want 3", g.Leases[0].FencingToken)
	}
}

// testGuardClock: a caller whose clock differs from the store's by more than
// MaxSkew is refused with ErrStoreClockSkew; within it, and with no Now, it is not.
func testGuardClock(t *testing.T, open Factory) {
	e := setup(t, open, 4)
	e.alloc(req(1), 1, 10*time.Minute)
	e.advance(time.Hour)
	for _, off := range []time.Duration{time.Second + ms, -time.Second - ms, 48 * time.Hour} {
		g := e.guard()
		g.Now, g.MaxSkew = e.now().Add(off), time.Second
		e.guarded("a clock "+off.String()+" off", g, idkeeper.ErrStoreClockSkew)
	}
	for _, off := range []time.Duration{time.Second, -time.Second, 0} {
		g := e.guard()
		g.Now, g.MaxSkew = e.now().Add(off), time.Second
		if _, err := e.s.Renew(e.ctx, g, idkeeper.RenewParams{Requester: req(1), KeyID: keyA, Duration: time.Hour}); err != nil {
			t.Fatalf("Renew with a clock %s off, at most 1s: %v", off, err)
		}
	}
	g := e.guard()
	g.Now = time.Time{}
	if _, err := e.s.Renew(e.ctx, g, idkeeper.RenewParams{Requester: req(1), KeyID: keyA, Duration: time.Hour}); err != nil {
		t.Fatalf("Renew without a clock to compare: %v", err)
	}
}
