package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper"
)

func testNow(t *testing.T, open Factory) {
	e := openEnv(t, open)
	for _, d := range []time.Duration{0, 1234567 * time.Microsecond, 48 * time.Hour} {
		e.clock.Advance(d)
		got, err := e.s.Now(e.ctx)
		e.must(err, "Now")
		wantTime(t, "Now", got, e.clock.Now().Truncate(ms))
		if got.Location() != time.UTC {
			t.Fatalf("Now() location %v, want UTC", got.Location())
		}
	}
}

func testPing(t *testing.T, open Factory) {
	e := openEnv(t, open)
	e.must(e.s.Ping(e.ctx), "Ping")
}

func testInitFresh(t *testing.T, open Factory) {
	e := setup(t, open, 8)
	e.wantCounts(idkeeper.Counts{Total: 8, Remaining: 8})
	for id := range 8 {
		st := e.node(idkeeper.NodeID(id))
		if st.Lease != nil || !st.Watermark.IsZero() || !st.QuarantinedUntil.IsZero() {
			t.Fatalf("fresh node %d = %+v, want free, watermark zero, never quarantined", id, st)
		}
	}
	for _, id := range []idkeeper.NodeID{-1, 8, 4096} {
		if _, err := e.s.Node(e.ctx, id); !errors.Is(err, idkeeper.ErrNotFound) {
			t.Fatalf("Node(%d) = %v, want ErrNotFound", id, err)
		}
	}
	if ls := e.leases(); len(ls) != 0 {
		t.Fatalf("fresh store has leases %v", nodeIDs(ls))
	}
	e.check()
	// The pool is usable at once: every node ready, so the holder may mint now.
	g := e.alloc(req(1), 8, 10*time.Minute)
	for _, l := range g.Leases {
		if l.NotBefore.After(e.now()) {
			t.Fatalf("fresh node %d: NotBefore %s is in the future", l.NodeID, fmtTime(l.NotBefore))
		}
	}
}

func testInitRandomSentinel(t *testing.T, open Factory) {
	a := setup(t, open, 4)
	b := setup(t, open, 4)
	if a.sentinel == b.sentinel {
		t.Fatalf("two fresh stores got the same sentinel %q", a.sentinel)
	}
}

func testInitAdopt(t *testing.T, open Factory) {
	e := setup(t, open, 4)
	e.alloc(req(1), 2, 10*time.Minute)
	before := e.leases()
	res, err := e.s.Init(e.ctx, 4)
	e.must(err, "Init again")
	if res.Fresh || res.Sentinel != e.sentinel {
		t.Fatalf("Init on an initialised store = %+v, want not Fresh and sentinel %q", res, e.sentinel)
	}
	wantSameLeases(t, "leases after Init again", e.leases(), before)
	e.check()
	// The adopted sentinel still matches: mutating methods work.
	e.renew(req(1), time.Hour)
	e.alloc(req(2), 2, 10*time.Minute)
}

func testInitGrow(t *testing.T, open Factory) {
	e := setup(t, open, 4)
	e.alloc(req(1), 4, 10*time.Minute)
	before := e.leases()
	res, err := e.s.Init(e.ctx, 7)
	e.must(err, "Init(7)")
	if res.Fresh || res.Sentinel != e.sentinel {
		t.Fatalf("Init growing the pool = %+v, want not Fresh and sentinel %q", res, e.sentinel)
	}
	e.nodes = 7
	e.wantCounts(idkeeper.Counts{Total: 7, Remaining: 3, Leased: 4})
	for id := 4; id < 7; id++ {
		st := e.node(idkeeper.NodeID(id))
		if st.Lease != nil || !st.Watermark.IsZero() || !st.QuarantinedUntil.IsZero() {
			t.Fatalf("added node %d = %+v, want free, watermark zero, never quarantined", id, st)
		}
	}
	wantSameLeases(t, "leases after growing", e.leases(), before)
	g := e.alloc(req(2), 3, 10*time.Minute)
	if ids := nodeIDs(g.Leases); ids[0] != 4 || ids[1] != 5 || ids[2] != 6 {
		t.Fatalf("after growing 4 → 7 with 0..3 held, Alloc(3) = %v, want [4 5 6]", ids)
	}
}

func testInitShrinkRefused(t *testing.T, open Factory) {
	e := setup(t, open, 4)
	e.alloc(req(1), 1, 10*time.Minute)
	_, err := e.s.Init(e.ctx, 3)
	wantCode(t, err, idkeeper.CodeInvalidRequest)
	e.check()
	e.node(3)
	res, err := e.s.Init(e.ctx, 4)
	e.must(err, "Init(4) after a refused shrink")
	if res.Fresh || res.Sentinel != e.sentinel {
		t.Fatalf("Init(4) = %+v, want the old sentinel %q", res, e.sentinel)
	}
}
