package backup

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/internal/harness/fakeclock"
	"github.com/idkeeper/idkeeper/protocol"
)

const (
	lease = idkeeper.DefaultLeaseDuration // 48h, the registries' and the plan's
	grace = idkeeper.DefaultGrace         // 10m
)

var (
	secret = []byte("receipt-secret-for-tests-0123456789abcdef")
	apiKey = idkeeper.APIKey{ID: "k"}
)

// newRegistry opens a registry over st, a new process with no memory of any
// generation, on the fake clock: a pool of 8, the default lease and grace.
func newRegistry(t *testing.T, st idkeeper.Store, clk *fakeclock.Clock) *idkeeper.Registry {
	t.Helper()
	reg, err := idkeeper.NewRegistry(st, idkeeper.Config{Nodes: 8, Clock: clk.Now, ReceiptSecret: secret,
		CleanupInterval: time.Hour, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.Open(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Close() })
	return reg
}

// window is one minting window a requester held on a node ID.
type window struct {
	who      string
	from, to time.Time
}

func overlap(a, b window) bool { return !a.to.Before(b.from) && !b.to.Before(a.from) }

// holder is a requester and what it holds of node ID n.
type holder struct {
	r        idkeeper.Requester
	receipts []string
	wins     []window
}

// note records the window on n that g grants, and the receipts to renew with.
func (h *holder) note(name string, g idkeeper.Grant, n idkeeper.NodeID) bool {
	h.receipts = h.receipts[:0]
	held := false
	for _, l := range g.Leases {
		h.receipts = append(h.receipts, l.Receipt)
		if l.NodeID == n {
			h.wins = append(h.wins, window{name, l.NotBefore, l.ExpiresAt})
			held = true
		}
	}
	return held
}

func (h *holder) last() time.Time {
	var t time.Time
	for _, w := range h.wins {
		if w.to.After(t) {
			t = w.to
		}
	}
	return t
}

// restoreSetup: a registry on a bolt store; requester A holds two node IDs; a
// backup is taken; then a new process B allocates node ID n (free in the
// backup), mints and renews. It returns the store, the backup and B.
func restoreSetup(t *testing.T, clk *fakeclock.Clock) (store, *idkeeper.Registry, []byte, *holder, idkeeper.NodeID) {
	t.Helper()
	ctx := context.Background()
	st := openBolt(t, clk)
	if _, err := st.Init(ctx, idkeeper.PoolSpec{Nodes: 8}); err != nil {
		t.Fatal(err)
	}
	reg := newRegistry(t, st, clk)
	if _, err := reg.Alloc(ctx, idkeeper.AllocRequest{Requester: who(1), Count: 2, Key: apiKey}); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Renew(ctx, idkeeper.RenewRequest{Requester: who(1), KeyID: apiKey.ID}); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Minute)
	data, _ := export(t, st, "bolt", clk.Now())

	clk.Advance(time.Hour)
	b := &holder{r: who(2)}
	g, err := reg.Alloc(ctx, idkeeper.AllocRequest{Requester: b.r, Count: 1, Key: apiKey})
	if err != nil {
		t.Fatal(err)
	}
	n := g.Leases[0].NodeID
	b.note("B", g, n)
	clk.Advance(time.Hour)
	g, err = reg.Renew(ctx, idkeeper.RenewRequest{Requester: b.r, KeyID: apiKey.ID, Receipts: b.receipts})
	if err != nil || !b.note("B", g, n) {
		t.Fatalf("B's renewal: %+v, %v", g, err)
	}
	clk.Advance(time.Hour)
	return st, reg, data, b, n
}

// The restore scenario (issue #12): back up; a new process B takes node ID N and
// mints; restore the old backup; a third process C allocates the whole pool again
// and again as time passes. C never gets N before the quarantine ends, and when it
// does its window starts after every expiry B had and after the latest expiry any
// lease granted before the import can have; B, renewing with its receipt, keeps N
// (restored) or is told it lost it; B's and C's windows on N never overlap.
func TestRestoreNeverHandsOutANodeIDTwice(t *testing.T) {
	for _, mode := range []string{bRenews, bLate, bGone} {
		t.Run(mode, func(t *testing.T) {
			if bad := restoreScenario(t, mode, lease, grace); len(bad) > 0 {
				t.Fatalf("%d violations, the first: %s", len(bad), bad[0])
			}
		})
	}
}

// The control: an import planned with a lease duration shorter than the
// registry's (1 min, no grace) lets C get N while B may still mint, and the
// scenario's checks say so.
func TestRestoreScenarioCatchesAShortPlan(t *testing.T) {
	bad := restoreScenario(t, bGone, time.Minute, 0)
	if !slices.ContainsFunc(bad, func(s string) bool { return strings.Contains(s, "overlap") }) {
		t.Fatalf("a plan 47 hours too short went unnoticed: %q", bad)
	}
}

// The modes of B in the restore scenario.
const (
	bRenews = "B renews through the restore"
	bLate   = "B renews after its lease ended"
	bGone   = "B never comes back"
)

// restoreScenario runs the restore scenario with B in mode and an import planned
// with planLease and planGrace (the registry's are lease and grace) and returns
// the violations of the restore rules it saw.
func restoreScenario(t *testing.T, mode string, planLease, planGrace time.Duration) (bad []string) {
	t.Helper()
	fail := func(format string, args ...any) { bad = append(bad, fmt.Sprintf(format, args...)) }
	ctx := context.Background()
	clk := fakeclock.New(t0)
	st, old, data, b, n := restoreSetup(t, clk)
	old.Close() // the server stops for the import

	plan, err := PlanFor(ctx, st, clk.Now(), planLease, planGrace)
	if err != nil {
		t.Fatal(err)
	}
	sum, err := Import(ctx, st, bytes.NewReader(data), plan)
	if err != nil {
		t.Fatal(err)
	}
	until := plan.Until()
	if !sum.Quarantined.Contains(n) || sum.Kept.Count() != 2 || !sum.Until.Equal(until) {
		t.Fatalf("summary %+v; N = %d", sum, n)
	}
	if !until.After(b.last()) {
		fail("the quarantine ends at %v, before B's lease at %v", until, b.last())
	}
	reg := newRegistry(t, st, clk) // the server starts on the restored store
	if reg.Generation() != sum.Generation {
		t.Fatalf("the registry adopted %+v, the import wrote %+v", reg.Generation(), sum.Generation)
	}

	var cs []window
	bHolds, restored, lost := mode == bRenews, false, false
	for round := 0; round < 40; round++ { // 40 rounds of 6 h: 10 days
		now := clk.Now()
		switch {
		case bHolds && round < 8: // B renews every 6 h for 2 days, then stops
			g, err := reg.Renew(ctx, idkeeper.RenewRequest{Requester: b.r, KeyID: apiKey.ID, Receipts: b.receipts})
			if err != nil {
				t.Fatal(err)
			}
			if !b.note("B", g, n) {
				fail("round %d: B lost N while its lease was live: %+v", round, g)
				bHolds = false
			}
			if round == 0 {
				restored = slices.Contains(g.Restored, n)
			}
		case mode == bLate && round == 10:
			g, err := reg.Renew(ctx, idkeeper.RenewRequest{Requester: b.r, KeyID: apiKey.ID, Receipts: b.receipts})
			if err != nil {
				t.Fatal(err)
			}
			if b.note("B", g, n) {
				fail("B got N back %v after its lease ended", now.Sub(b.last()))
			}
			lost = len(g.Leases) == 0
		}
		// C takes every node ID it can, one requester per node ID.
		for j := 0; ; j++ {
			c := who(100 + 10*round + j)
			g, err := reg.Alloc(ctx, idkeeper.AllocRequest{Requester: c, Count: 1, Key: apiKey})
			if protocol.ErrorCode(err) == protocol.CodeNodeIDsExhausted {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			l := g.Leases[0]
			if l.NodeID != n {
				continue
			}
			if now.Before(sum.Until) {
				fail("C got N at %v, before the quarantine ends at %v", now, sum.Until)
			}
			if !l.NotBefore.After(b.last()) || !l.NotBefore.After(plan.Now.Add(lease)) {
				fail("C's window on N starts at %v: B's last expiry %v, the latest any lease before the import can have %v",
					l.NotBefore, b.last(), plan.Now.Add(lease))
			}
			cs = append(cs, window{"C", l.NotBefore, l.ExpiresAt})
		}
		clk.Advance(6 * time.Hour)
		if _, _, err := reg.Cleanup(ctx); err != nil {
			t.Fatal(err)
		}
	}
	switch {
	case len(cs) == 0:
		fail("C never got N: the scenario proves nothing")
	case mode == bRenews && !restored:
		fail("B's first renewal after the import did not restore N from its receipt")
	case mode == bLate && !lost:
		fail("B was not told it holds nothing")
	}
	for _, bw := range b.wins {
		for _, cw := range cs {
			if overlap(bw, cw) {
				fail("B's window %v–%v and C's %v–%v on node %d overlap", bw.from, bw.to, cw.from, cw.to, n)
			}
		}
	}
	return bad
}

// A registry that adopted the old generation and runs on through the import sees
// it as a store reset: its next Alloc takes the reset path (the imported
// generation adopted, nothing stale granted: every node ID is quarantined or kept)
// and B's Renew with its receipt restores N.
func TestRegistryOnTheOldGenerationSeesAReset(t *testing.T) {
	ctx := context.Background()
	clk := fakeclock.New(t0)
	st, reg, data, b, n := restoreSetup(t, clk)
	before := reg.Generation()
	plan, err := PlanFor(ctx, st, clk.Now(), lease, grace)
	if err != nil {
		t.Fatal(err)
	}
	sum, err := Import(ctx, st, bytes.NewReader(data), plan)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Generation.Number <= before.Number || sum.Generation.ID == before.ID {
		t.Fatalf("generation %+v after %+v", sum.Generation, before)
	}
	clk.Advance(time.Minute)
	g, err := reg.Alloc(ctx, idkeeper.AllocRequest{Requester: who(3), Count: 1, Key: apiKey})
	if protocol.ErrorCode(err) != protocol.CodeNodeIDsExhausted {
		t.Fatalf("Alloc after the import on the old generation: %+v, %v; want NODE_IDS_EXHAUSTED (everything quarantined or kept)", g, err)
	}
	if reg.Generation().ID != sum.Generation.ID {
		t.Fatalf("the registry holds generation %+v, the store %+v", reg.Generation(), sum.Generation)
	}
	g, err = reg.Renew(ctx, idkeeper.RenewRequest{Requester: b.r, KeyID: apiKey.ID, Receipts: b.receipts})
	if err != nil || !slices.Contains(g.Restored, n) || !b.note("B", g, n) || !b.wins[len(b.wins)-1].from.Equal(b.wins[0].from) {
		t.Fatalf("B's renewal: %+v, %v; want N restored with its window's start", g, err)
	}
}
