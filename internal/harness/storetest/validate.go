package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/protocol"
)

// testValidation: every store refuses the same bad arguments with the same
// INVALID_REQUEST Error (the field and the text of the shared checks in the
// idkeeper package), before its guard, and writes nothing.
func testValidation(t *testing.T, open Factory) {
	e := setup(t, open, 4)
	e.alloc(req(1), 1, 10*time.Minute)
	snap := e.snapshot()
	bad := req(2)
	bad.PID = 0
	g := e.guard()
	stale := idkeeper.Guard{Generation: "not-this-one"} // the argument is refused before the guard
	cases := []struct {
		what string
		err  error
		want error
	}{
		{"Alloc of an invalid requester", second(e.s.Alloc(e.ctx, stale, idkeeper.AllocParams{Requester: bad, KeyID: keyA, Count: 1, First: time.Minute})), bad.Validate()},
		{"Alloc of 0", second(e.s.Alloc(e.ctx, g, idkeeper.AllocParams{Requester: req(2), KeyID: keyA, Count: 0, First: time.Minute})),
			protocol.Invalidf("count", "count must be at least 1, got 0")},
		{"Alloc for 0s", second(e.s.Alloc(e.ctx, g, idkeeper.AllocParams{Requester: req(2), KeyID: keyA, Count: 1})),
			protocol.Invalidf("first", "a new lease lasts at least 1ms, not 0s")},
		{"Alloc under a negative quota", second(e.s.Alloc(e.ctx, g, idkeeper.AllocParams{Requester: req(2), KeyID: keyA, Count: 1, First: time.Minute, MaxNodes: -1})),
			protocol.Invalidf("maxNodes", "a quota must not be negative, got -1")},
		{"Renew of an invalid requester", second(e.s.Renew(e.ctx, stale, idkeeper.RenewParams{Requester: bad, KeyID: keyA, Duration: time.Hour})), bad.Validate()},
		{"Renew for 0s", second(e.s.Renew(e.ctx, g, idkeeper.RenewParams{Requester: req(1), KeyID: keyA})),
			protocol.Invalidf("duration", "a lease lasts at least 1ms, not 0s")},
		{"Renew with a negative grace", second(e.s.Renew(e.ctx, g, idkeeper.RenewParams{Requester: req(1), KeyID: keyA, Duration: time.Hour, Grace: -time.Second})),
			protocol.Invalidf("grace", "the grace period must not be negative, got -1s")},
		{"Remove of an invalid requester", second(e.s.Remove(e.ctx, stale, idkeeper.RemoveParams{Requester: bad, KeyID: keyA})), bad.Validate()},
		{"Init of 0", second(e.s.Init(e.ctx, poolOf(0))), idkeeper.CheckPoolSize(0)},
		{"Init of too many", second(e.s.Init(e.ctx, poolOf(idkeeper.MaxPoolNodes+1))), idkeeper.CheckPoolSize(idkeeper.MaxPoolNodes + 1)},
		{"Init of fewer", second(e.s.Init(e.ctx, poolOf(3))), idkeeper.ShrinkRefused(4, 3)},
		{"Grow to -1", e.s.Grow(e.ctx, stale, poolOf(-1)), idkeeper.CheckPoolSize(-1)},
		{"Grow to fewer", e.s.Grow(e.ctx, g, poolOf(2)), idkeeper.ShrinkRefused(4, 2)},
		{"Reset to 0", second(e.s.Reset(e.ctx, idkeeper.ResetParams{Seen: e.gen, Until: e.now()})), idkeeper.CheckPoolSize(0)},
		{"Reset above the last token", second(e.s.Reset(e.ctx, idkeeper.ResetParams{Seen: e.gen, Pool: poolOf(4), Until: e.now(), MinFence: idkeeper.MaxFencingToken + 1})),
			protocol.Invalidf("minFence", "a fencing counter of %d is above the last token 2^53-1", uint64(idkeeper.MaxFencingToken+1))},
		{"Quarantine outside the pool", e.s.Quarantine(e.ctx, g, e.now().Add(time.Hour), 1, 4), idkeeper.OutsidePool(4)},
	}
	for _, c := range cases {
		var got, want *idkeeper.Error
		if !errors.As(c.err, &got) || !errors.As(c.want, &want) {
			t.Fatalf("%s: %v, want %v", c.what, c.err, c.want)
		}
		if got.Code != protocol.CodeInvalidRequest || got.Field != want.Field || got.Message != want.Message {
			t.Errorf("%s: %v (field %q), want %q (field %q)", c.what, got, got.Field, want.Message, want.Field)
		}
	}
	e.wantUnchanged("refused calls", snap)
	if st := e.status(); st.Pool.Nodes != 4 || st.Generation != e.gen {
		t.Fatalf("after refused calls: %+v", st)
	}
}

// second returns the error of a two-value call.
func second[T any](_ T, err error) error { return err }

// testClaimImpossibleIgnored: a claim no grant can have made (a token above
// MaxFencingToken, or 0) is ignored like one that is not news: nothing is restored
// or contested, even on a restorable node.
func testClaimImpossibleIgnored(t *testing.T, open Factory) {
	e := setup(t, open, 2)
	t0 := e.now()
	e.alloc(req(2), 1, 10*time.Minute) // node 0, held by another requester
	e.afterReset(10, t0.Add(50*time.Hour))
	snap := e.snapshot()
	for _, tok := range []uint64{idkeeper.MaxFencingToken + 1, 1 << 63, 0} {
		claims := []idkeeper.Claim{
			{NodeID: 0, Token: tok, NotBefore: t0, ExpiresAt: t0.Add(time.Hour)},
			{NodeID: 1, Token: tok, NotBefore: t0, ExpiresAt: t0.Add(time.Hour)},
		}
		e.renewClaims(req(1), time.Hour, 10*time.Minute, claims, nil, nil)
	}
	e.wantUnchanged("impossible claims", snap)
}

// testReplicated: a store that is an idkeeper.ReplicatedStore reports a non-empty
// replication ID, the same on every call while nothing happens to its data set,
// and holds an unchanged ID safe. A store without replication IDs skips it.
func testReplicated(t *testing.T, open Factory) {
	e := setup(t, open, 2)
	rs, ok := e.s.(idkeeper.ReplicatedStore)
	if !ok {
		t.Skipf("%T is not an idkeeper.ReplicatedStore", e.s)
	}
	id, err := rs.ReplicationID(e.ctx)
	if err != nil || id == "" {
		t.Fatalf("ReplicationID = %q, %v; want an ID", id, err)
	}
	e.alloc(req(1), 1, time.Minute)
	if again, err := rs.ReplicationID(e.ctx); err != nil || again != id {
		t.Fatalf("ReplicationID after a write = %q, %v; want %q", again, err, id)
	}
	if safe, why, err := rs.ReplicationChangeSafe(e.ctx, id); err != nil || !safe {
		t.Fatalf("ReplicationChangeSafe of the current ID = %v, %q, %v; want safe", safe, why, err)
	}
}
