package storetest

import (
	"testing"
	"time"

	"github.com/idkeeper/idkeeper"
)

// Cooling node IDs in Counts (issue #20): a free node ID whose fenced watermark is
// not before now is allocatable, so it counts in Remaining, and it is cooling: a
// grant of it opens its window only at NextReadyAt.

// wantCooling computes, from node states, the Cooling and NextReadyAt that Counts
// must report at now for a free, unquarantined node st; check calls it per node.
func wantCooling(c *idkeeper.Counts, st idkeeper.NodeState, now time.Time) {
	w := st.Fenced()
	if w.Before(now) {
		return
	}
	if at := w.Add(ms); c.Cooling == 0 || at.Before(c.NextReadyAt) {
		c.NextReadyAt = at
	}
	c.Cooling++
}

// cooling is a Counts with Cooling n, NextReadyAt next, and Remaining ready + n.
func cooling(c idkeeper.Counts, ready, n int, next time.Time) idkeeper.Counts {
	c.Remaining, c.Cooling, c.NextReadyAt = ready+n, n, next
	return c
}

// testCountsCooling: a node freed without mintedUpTo cools until its watermark, and
// counts in Remaining and Cooling; it turns ready the millisecond after its
// watermark, without any call that moves it; NextReadyAt is the earliest cooling
// node's watermark + 1 ms, the NotBefore of its grant.
func testCountsCooling(t *testing.T, open Factory) {
	e := setup(t, open, 4)
	t0 := e.now()
	e.alloc(req(1), 1, time.Hour)
	e.alloc(req(2), 1, 2*time.Hour)
	e.remove(req(2), time.Time{}) // cooling until t0+2h
	e.remove(req(1), time.Time{}) // cooling until t0+1h
	base := idkeeper.Counts{Total: 4}
	e.wantCounts(cooling(base, 2, 2, t0.Add(time.Hour+ms)))

	e.clock.Set(t0.Add(time.Hour)) // at the watermark: still cooling
	e.wantCounts(cooling(base, 2, 2, t0.Add(time.Hour+ms)))
	e.check()
	e.clock.Set(t0.Add(time.Hour + ms)) // past it: ready, nothing moved it
	e.wantCounts(cooling(base, 3, 1, t0.Add(2*time.Hour+ms)))
	e.check()

	// A grant of the cooling node opens its window at the NextReadyAt of before.
	e.alloc(req(3), 3, 10*time.Minute) // the three ready ones
	next := e.counts().NextReadyAt
	g := e.alloc(req(4), 1, 10*time.Minute)
	wantTime(t, "NotBefore of the cooling node's grant", g.Leases[0].NotBefore, next)
	e.wantCounts(idkeeper.Counts{Total: 4, Leased: 4})

	e.clock.Set(t0.Add(2*time.Hour + ms))
	e.wantCounts(idkeeper.Counts{Total: 4, InGrace: 4})
	e.check()
}

// testCountsQuarantineEnds: a quarantine that ends before the node's watermark
// ends into cooling, one that ends after it into ready, both judged at now even
// before any Alloc or Reclaim moved the node.
func testCountsQuarantineEnds(t *testing.T, open Factory) {
	e := setup(t, open, 3)
	t0 := e.now()
	a := e.allocOne(req(1), 3*time.Hour)
	b := e.allocOne(req(2), time.Hour)
	e.remove(req(1), time.Time{}) // a: watermark t0+3h
	e.remove(req(2), time.Time{}) // b: watermark t0+1h
	e.quarantine(t0.Add(2*time.Hour), a, b)
	e.wantCounts(idkeeper.Counts{Total: 3, Remaining: 1, Quarantined: 2})

	e.clock.Set(t0.Add(2 * time.Hour)) // both quarantines end now
	e.check()
	e.wantCounts(cooling(idkeeper.Counts{Total: 3}, 2, 1, t0.Add(3*time.Hour+ms)))
	// The same after a call that promotes.
	if n := e.reclaim(0); n != 0 {
		t.Fatalf("Reclaim = %d, want 0", n)
	}
	e.wantCounts(cooling(idkeeper.Counts{Total: 3}, 2, 1, t0.Add(3*time.Hour+ms)))

	// A node quarantined while held and freed into its quarantine.
	c := e.allocOne(req(3), 10*time.Minute) // the ready node that never cooled
	if c == a {
		t.Fatalf("Alloc took cooling node %d before a ready one", a)
	}
	e.renew(req(3), 5*time.Hour) // watermark t0+7h
	e.quarantine(t0.Add(4*time.Hour), c)
	e.remove(req(3), time.Time{})
	e.wantCounts(cooling(idkeeper.Counts{Total: 3, Quarantined: 1}, 1, 1, t0.Add(3*time.Hour+ms)))
	e.clock.Set(t0.Add(4 * time.Hour)) // c's quarantine ends into cooling; a is ready
	e.wantCounts(cooling(idkeeper.Counts{Total: 3}, 2, 1, t0.Add(7*time.Hour+ms)))
	e.check()
}

// testCountsResetFloorCools: after a reset, the quarantine and the floor end at
// the same instant: at it the node is cooling, one millisecond later ready.
func testCountsResetFloorCools(t *testing.T, open Factory) {
	e := setup(t, open, 2)
	until := e.now().Add(30 * time.Minute)
	e.reset(idkeeper.ResetParams{Seen: e.gen, Pool: poolOf(2), Until: until})
	e.wantCounts(idkeeper.Counts{Total: 2, Quarantined: 2})
	e.clock.Set(until)
	e.wantCounts(cooling(idkeeper.Counts{Total: 2}, 0, 2, until.Add(ms)))
	e.check()
	e.clock.Set(until.Add(ms))
	e.wantCounts(idkeeper.Counts{Total: 2, Remaining: 2})
	e.check()
}

// testCountsMintedUpToReady: Remove with mintedUpTo makes the node ready at once;
// without it the node cools until its lease's expiry.
func testCountsMintedUpToReady(t *testing.T, open Factory) {
	e := setup(t, open, 2)
	t0 := e.now()
	e.alloc(req(1), 1, 10*time.Minute)
	e.renew(req(1), 48*time.Hour)
	e.alloc(req(2), 1, 10*time.Minute)
	e.renew(req(2), 48*time.Hour)
	e.advance(time.Minute)
	e.remove(req(1), t0.Add(30*time.Second))
	e.wantCounts(idkeeper.Counts{Total: 2, Remaining: 1, Leased: 1})
	e.remove(req(2), time.Time{})
	e.wantCounts(cooling(idkeeper.Counts{Total: 2}, 1, 1, t0.Add(48*time.Hour+ms)))
	e.check()
}
