package storetest

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/protocol"
)

// testRandom runs long random sequences of lease operations (revocations
// included), clock steps and resets on a small pool. Every step goes through the env's checking helpers, and every
// answer is checked against what the store showed just before: the pool stays
// consistent and every rule of the doc comments holds in states the scripted tests
// do not reach. The seeds are fixed, so a failure reproduces.
func testRandom(t *testing.T, open Factory) {
	for _, seed := range []uint64{1, 2, 3} {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			e := setup(t, open, 6)
			rng := rand.New(rand.NewPCG(seed, 42))
			for range 200 {
				e.randomStep(rng)
			}
		})
	}
}

func (e *env) randomStep(rng *rand.Rand) {
	e.t.Helper()
	r := req(rng.IntN(5))
	minutes := func(n int) time.Duration { return time.Duration(rng.IntN(n)) * time.Minute }
	switch op := rng.IntN(20); {
	case op < 6:
		e.randomAlloc(r, 1+rng.IntN(3), time.Minute+minutes(20))
	case op < 9:
		e.randomRenew(r, time.Minute+minutes(120))
	case op < 12:
		var minted time.Time
		if held := e.heldBy(r); len(held) > 0 && rng.IntN(3) > 0 {
			minted = held[0].GrantedAt.Add(minutes(60) - 30*time.Minute)
		}
		e.randomRemove(r, minted)
	case op < 14:
		e.reclaim(minutes(20))
	case op < 15:
		id := idkeeper.NodeID(rng.IntN(e.nodes))
		until := e.now().Add(minutes(90) - 30*time.Minute)
		was := e.node(id).QuarantinedUntil
		e.quarantine(until, id)
		wantTime(e.t, "QuarantinedUntil", e.node(id).QuarantinedUntil, maxTime(was, until))
	case op < 19:
		e.advance(minutes(30) + time.Duration(rng.IntN(1000))*ms)
	default:
		if rng.IntN(4) == 0 {
			e.randomReset(rng)
		} else {
			e.randomRevoke(rng, minutes(20))
		}
	}
}

// randomRevoke revokes a random lease, or, one time in four (and when there is
// none), tries a token no lease on that node has, which must change nothing.
func (e *env) randomRevoke(rng *rand.Rand, grace time.Duration) {
	e.t.Helper()
	ls := e.leases()
	if len(ls) == 0 || rng.IntN(4) == 0 {
		id := idkeeper.NodeID(rng.IntN(e.nodes + 1))
		token := uint64(rng.IntN(int(e.fence) + 2))
		if id < idkeeper.NodeID(e.nodes) {
			if st := e.node(id); st.Lease != nil && st.Lease.FencingToken == token {
				token = 0
			}
		}
		e.wantRevokeNotFound("a random token", id, token)
		return
	}
	e.revoke(ls[rng.IntN(len(ls))], grace)
}

func (e *env) randomAlloc(r idkeeper.Requester, count int, first time.Duration) {
	e.t.Helper()
	held := e.heldBy(r)
	if len(held) == 0 {
		if c := e.counts(); c.Remaining < count {
			e.wantExhausted(r, count, c.Remaining)
			return
		}
		e.alloc(r, count, first)
		return
	}
	if count != len(held) {
		_, err := e.allocRaw(r, count, first)
		wantCode(e.t, err, protocol.CodeRequesterCountMismatch)
		e.check()
		return
	}
	g, err := e.allocRaw(r, count, first)
	e.must(err, "repeated Alloc")
	now := e.now()
	for i := range held {
		held[i].ExpiresAt = maxTime(held[i].ExpiresAt, now.Add(first))
	}
	wantSameLeases(e.t, "repeated Alloc", g.Leases, held)
	e.check()
}

func (e *env) randomRenew(r idkeeper.Requester, d time.Duration) {
	e.t.Helper()
	held := e.heldBy(r)
	wm := map[idkeeper.NodeID]time.Time{}
	for _, l := range held {
		wm[l.NodeID] = e.node(l.NodeID).Watermark
	}
	g := e.renew(r, d)
	now := e.now()
	for i := range held {
		held[i].ExpiresAt, held[i].RenewedAt = maxTime(held[i].ExpiresAt, now.Add(d)), now
		wantTime(e.t, "watermark after Renew", e.node(held[i].NodeID).Watermark, maxTime(held[i].ExpiresAt, wm[held[i].NodeID]))
	}
	wantSameLeases(e.t, "Renew", g.Leases, held)
	e.check()
}

func (e *env) randomRemove(r idkeeper.Requester, minted time.Time) {
	e.t.Helper()
	held := e.heldBy(r)
	before := map[idkeeper.NodeID]idkeeper.NodeState{}
	for _, l := range held {
		before[l.NodeID] = e.node(l.NodeID)
	}
	e.remove(r, minted)
	now := e.now()
	for _, l := range held {
		b := before[l.NodeID]
		want := b.Watermark
		if !minted.IsZero() {
			want = maxTime(minTime(minted, l.ExpiresAt), l.NotBefore.Add(-ms))
			if b.QuarantinedUntil.After(now) {
				want = maxTime(want, b.QuarantinedUntil)
			}
		}
		wantTime(e.t, fmt.Sprintf("watermark of node %d after Remove(mintedUpTo %s)", l.NodeID, fmtTime(minted)),
			e.node(l.NodeID).Watermark, want)
	}
}

func (e *env) randomReset(rng *rand.Rand) {
	e.t.Helper()
	snap := e.snapshot()
	until := e.now().Add(time.Duration(rng.IntN(120)) * time.Minute)
	old := e.gen
	res := e.reset(idkeeper.ResetParams{Seen: old, Pool: poolOf(e.nodes), Until: until, MinFence: e.fence + uint64(rng.IntN(3))})
	if !res.NewGeneration || res.Generation.ID == old.ID {
		e.t.Fatalf("Reset(adopted generation) = %+v", res)
	}
	e.wantRaised(snap, until)
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
