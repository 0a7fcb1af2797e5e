package storetest

import (
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/protocol"
)

// The lease history (idkeeper.HistoryStore, issue #16).

var historyCases = []testCase{
	{"History/Grant", testHistoryGrant},
	{"History/RenewRaisesWindowEnd", testHistoryRenew},
	{"History/Remove", testHistoryRemove},
	{"History/ReclaimAndRevoke", testHistoryReclaimRevoke},
	{"History/Restore", testHistoryRestore},
	{"History/Contest", testHistoryContest},
	{"History/UniqueOverReuse", testHistoryUnique},
	{"History/NodeHistoryPages", testHistoryPages},
	{"History/Prune", testHistoryPrune},
	{"History/BadArguments", testHistoryBadArgs},
}

// leaseAt returns the records of node whose window holds t.
func (e *env) leaseAt(node idkeeper.NodeID, t time.Time) []idkeeper.HistoryRecord {
	e.t.Helper()
	hs, err := e.s.LeaseAt(e.ctx, node, t)
	e.must(err, fmt.Sprintf("LeaseAt(%d, %s)", node, fmtTime(t)))
	for i, h := range hs {
		if h.NodeID != node || !h.Holds(t) || i > 0 && h.Token <= hs[i-1].Token {
			e.t.Fatalf("LeaseAt(%d, %s) returned %s", node, fmtTime(t), fmtRecords(hs))
		}
	}
	return hs
}

// record returns the one record of node whose window holds t.
func (e *env) record(node idkeeper.NodeID, t time.Time) idkeeper.HistoryRecord {
	e.t.Helper()
	hs := e.leaseAt(node, t)
	if len(hs) != 1 {
		e.t.Fatalf("LeaseAt(%d, %s) = %s, want one record", node, fmtTime(t), fmtRecords(hs))
	}
	return hs[0]
}

// checkHistory checks that each held lease has its open record, the node's
// newest: same token, requester, key, WindowEnd its ExpiresAt, and (unless its
// window is empty, a cooling grant's before its first Renew) the one found at
// ExpiresAt.
func (e *env) checkHistory(ls []idkeeper.Lease) {
	e.t.Helper()
	for _, l := range ls {
		hs, err := e.s.NodeHistory(e.ctx, l.NodeID, 0, 1)
		e.must(err, "NodeHistory")
		if len(hs) != 1 {
			e.t.Fatalf("no history of held lease %s", fmtLease(l))
		}
		h := hs[0]
		if h.Token != l.FencingToken || h.Requester.Key() != l.Requester.Key() || h.KeyID != l.KeyID ||
			h.End != idkeeper.EndHeld || !h.EndedAt.IsZero() || !h.WindowEnd.Equal(l.ExpiresAt) || h.NotBefore.After(l.NotBefore) {
			e.t.Fatalf("history of held lease %s:\n%s", fmtLease(l), fmtRecords(hs))
		}
		if !l.NotBefore.After(l.ExpiresAt) {
			if at := e.record(l.NodeID, l.ExpiresAt); at.Token != l.FencingToken {
				e.t.Fatalf("LeaseAt the expiry of held lease %s:\n%s", fmtLease(l), fmtRecords([]idkeeper.HistoryRecord{at}))
			}
		}
	}
}

func (e *env) historyCount() int {
	e.t.Helper()
	n, err := e.s.HistoryCount(e.ctx)
	e.must(err, "HistoryCount")
	return n
}

func wantEnded(t *testing.T, h idkeeper.HistoryRecord, end idkeeper.LeaseEnd, at time.Time) {
	t.Helper()
	if h.End != end || !h.EndedAt.Equal(at) {
		t.Fatalf("record %s: want ended %q at %s", fmtRecords([]idkeeper.HistoryRecord{h}), end, fmtTime(at))
	}
}

// testHistoryGrant: a grant writes a record with everything the origin answer
// needs; an idempotent repeat raises its window end and keeps the client.
func testHistoryGrant(t *testing.T, open Factory) {
	e := setup(t, open, 4)
	client := idkeeper.ClientInfo{Host: "web-7.example", Labels: map[string]string{"service": "orders", "version": "1.4.2"}}
	g := e.allocP(idkeeper.AllocParams{Requester: req(1), KeyID: keyA, Count: 2, First: 10 * time.Minute, Client: client})
	if n := e.historyCount(); n != 2 {
		t.Fatalf("HistoryCount after granting 2 = %d", n)
	}
	for _, l := range g.Leases {
		h := e.record(l.NodeID, l.NotBefore)
		if h.Token != l.FencingToken || h.Requester.Key() != req(1).Key() || !h.Requester.StartedAt.Equal(req(1).StartedAt) ||
			h.Requester.MachineID != req(1).MachineID || h.KeyID != keyA || h.Client.Host != client.Host ||
			!maps.Equal(h.Client.Labels, client.Labels) || !h.GrantedAt.Equal(l.GrantedAt) || !h.NotBefore.Equal(l.NotBefore) ||
			!h.WindowEnd.Equal(l.ExpiresAt) || h.End != idkeeper.EndHeld || h.FromReceipt || !h.MintedUpTo.IsZero() {
			t.Fatalf("record of %s: %s", fmtLease(l), fmtRecords([]idkeeper.HistoryRecord{h}))
		}
		if hs := e.leaseAt(l.NodeID, l.ExpiresAt.Add(ms)); len(hs) != 0 {
			t.Fatalf("LeaseAt past the window = %s", fmtRecords(hs))
		}
	}
	if hs := e.leaseAt(3, e.now()); len(hs) != 0 {
		t.Fatalf("LeaseAt of a node never granted = %s", fmtRecords(hs))
	}
	e.advance(time.Minute)
	g2, err := e.s.Alloc(e.ctx, e.guard(), idkeeper.AllocParams{Requester: req(1), KeyID: keyA, Count: 2, First: 10 * time.Minute,
		Client: idkeeper.ClientInfo{Host: "other"}})
	e.must(err, "idempotent Alloc")
	e.checkHistory(g2.Leases)
	if h := e.record(g2.Leases[0].NodeID, g2.Leases[0].ExpiresAt); h.Client.Host != client.Host {
		t.Fatalf("an idempotent Alloc changed the client: %+v", h.Client)
	}
	if n := e.historyCount(); n != 2 {
		t.Fatalf("HistoryCount after an idempotent Alloc = %d", n)
	}
}

func testHistoryRenew(t *testing.T, open Factory) {
	e := setup(t, open, 2)
	l := e.alloc(req(1), 1, 10*time.Minute).Leases[0]
	e.advance(5 * time.Minute)
	g := e.renew(req(1), time.Hour)
	e.checkHistory(g.Leases)
	if h := e.record(l.NodeID, l.NotBefore); !h.WindowEnd.Equal(g.Leases[0].ExpiresAt) || !h.GrantedAt.Equal(l.GrantedAt) {
		t.Fatalf("after Renew: %s", fmtRecords([]idkeeper.HistoryRecord{h}))
	}
}

// testHistoryRemove: Remove ends the records; with MintedUpTo the window ends at
// what the holder attested, and the next grant's window starts after it.
func testHistoryRemove(t *testing.T, open Factory) {
	e := setup(t, open, 1)
	l := e.alloc(req(1), 1, time.Hour).Leases[0]
	e.advance(10 * time.Minute)
	minted := e.now().Add(-time.Minute)
	e.remove(req(1), minted)
	h := e.record(0, minted)
	wantEnded(t, h, idkeeper.EndRemoved, e.now())
	wantTime(t, "WindowEnd after Remove with MintedUpTo", h.WindowEnd, minted)
	wantTime(t, "MintedUpTo", h.MintedUpTo, minted)
	if hs := e.leaseAt(0, minted.Add(ms)); len(hs) != 0 {
		t.Fatalf("LeaseAt past MintedUpTo = %s", fmtRecords(hs))
	}
	e.advance(time.Minute)
	l2 := e.alloc(req(2), 1, time.Hour).Leases[0]
	if h2 := e.record(0, l2.NotBefore); h2.Token != l2.FencingToken || h2.End != idkeeper.EndHeld {
		t.Fatalf("the next grant's record: %s", fmtRecords([]idkeeper.HistoryRecord{h2}))
	}
	if h1 := e.record(0, l.NotBefore); h1.Token != l.FencingToken {
		t.Fatalf("the first grant's record: %s", fmtRecords([]idkeeper.HistoryRecord{h1}))
	}
	// Without MintedUpTo the window stays the lease's.
	e.advance(time.Minute)
	e.remove(req(2), time.Time{})
	h2 := e.record(0, l2.ExpiresAt)
	wantEnded(t, h2, idkeeper.EndRemoved, e.now())
	if !h2.MintedUpTo.IsZero() || !h2.WindowEnd.Equal(l2.ExpiresAt) {
		t.Fatalf("Remove without MintedUpTo: %s", fmtRecords([]idkeeper.HistoryRecord{h2}))
	}
}

func testHistoryReclaimRevoke(t *testing.T, open Factory) {
	e := setup(t, open, 2)
	a := e.alloc(req(1), 1, time.Minute).Leases[0]
	b := e.alloc(req(2), 1, time.Hour).Leases[0]
	e.advance(2 * time.Minute)
	e.revoke(b, time.Minute)
	wantEnded(t, e.record(b.NodeID, b.ExpiresAt), idkeeper.EndRevoked, e.now())
	e.advance(10 * time.Minute)
	if n := e.reclaim(5 * time.Minute); n != 1 {
		t.Fatalf("Reclaim = %d", n)
	}
	h := e.record(a.NodeID, a.ExpiresAt)
	wantEnded(t, h, idkeeper.EndReclaimed, e.now())
	wantTime(t, "WindowEnd of a reclaimed lease", h.WindowEnd, a.ExpiresAt)
}

// testHistoryRestore: a grant the store forgot is recorded from its receipt when
// its holder renews, with the receipt's window start.
func testHistoryRestore(t *testing.T, open Factory) {
	e := setup(t, open, 4)
	t0 := e.now()
	e.afterReset(10, t0.Add(50*time.Hour))
	e.advance(time.Minute)
	c := idkeeper.Claim{NodeID: 2, Token: 7, NotBefore: t0.Add(-5 * time.Minute), ExpiresAt: t0.Add(10 * time.Minute)}
	g := e.renewClaims(req(1), 48*time.Hour, 10*time.Minute, []idkeeper.Claim{c}, []idkeeper.NodeID{2}, nil)
	e.checkHistory(g.Leases)
	h := e.record(2, c.NotBefore)
	if h.Token != 7 || !h.FromReceipt || !h.NotBefore.Equal(c.NotBefore) || !h.GrantedAt.Equal(e.now()) {
		t.Fatalf("restored record: %s", fmtRecords([]idkeeper.HistoryRecord{h}))
	}
}

// testHistoryContest: a contest ends the held lease's record and records the
// claimant's forgotten grant, both contested.
func testHistoryContest(t *testing.T, open Factory) {
	e := setup(t, open, 1)
	held := e.alloc(req(2), 1, 10*time.Minute).Leases[0]
	held = e.renew(req(2), 2*time.Hour).Leases[0]
	e.afterReset(8, e.now().Add(time.Minute))
	e.advance(time.Minute)
	c := idkeeper.Claim{NodeID: 0, Token: 5, NotBefore: e.now(), ExpiresAt: e.now().Add(3 * time.Hour)}
	e.renewClaims(req(1), time.Hour, 10*time.Minute, []idkeeper.Claim{c}, nil, []idkeeper.NodeID{0})
	e.freed([]idkeeper.Lease{held})
	h := e.record(0, held.NotBefore)
	wantEnded(t, h, idkeeper.EndContested, e.now())
	if h.Token != held.FencingToken || !h.WindowEnd.Equal(held.ExpiresAt) || h.FromReceipt {
		t.Fatalf("contested held record: %s", fmtRecords([]idkeeper.HistoryRecord{h}))
	}
	hs := e.leaseAt(0, c.ExpiresAt)
	if len(hs) != 1 || hs[0].Token != c.Token || !hs[0].FromReceipt || hs[0].End != idkeeper.EndContested ||
		hs[0].Requester.Key() != req(1).Key() || !hs[0].NotBefore.Equal(c.NotBefore) || !hs[0].EndedAt.Equal(e.now()) {
		t.Fatalf("the claimant's record: %s", fmtRecords(hs))
	}
	// Both windows hold the overlap: a contest is exactly when two holders could
	// have minted with the node ID at once, and the answer says so.
	if hs := e.leaseAt(0, c.NotBefore); len(hs) != 2 || hs[0].Token != held.FencingToken {
		t.Fatalf("LeaseAt in both windows = %s, want both records", fmtRecords(hs))
	}
}

// testHistoryUnique: over many grants of few node IDs, each minted millisecond
// maps back to exactly the grant that could mint it.
func testHistoryUnique(t *testing.T, open Factory) {
	e := setup(t, open, 2)
	var grants []idkeeper.Lease
	for i := 1; i <= 12; i++ {
		l := e.alloc(req(i), 1, 10*time.Minute).Leases[0]
		grants = append(grants, l)
		e.advance(3 * time.Minute)
		switch i % 3 {
		case 0:
			e.remove(req(i), e.now().Add(-time.Minute))
		case 1:
			e.remove(req(i), time.Time{})
		default:
			e.renew(req(i), 5*time.Minute)
			e.advance(time.Minute)
			e.remove(req(i), e.now())
		}
		e.advance(time.Minute)
	}
	for _, l := range grants {
		h := e.record(l.NodeID, l.NotBefore)
		if h.Token != l.FencingToken {
			t.Fatalf("the first millisecond of %s maps to %s", fmtLease(l), fmtRecords([]idkeeper.HistoryRecord{h}))
		}
	}
	if n := e.historyCount(); n != len(grants) {
		t.Fatalf("HistoryCount = %d, want %d", n, len(grants))
	}
}

func testHistoryPages(t *testing.T, open Factory) {
	e := setup(t, open, 1)
	var tokens []uint64
	for i := 1; i <= 5; i++ {
		tokens = append(tokens, e.alloc(req(i), 1, time.Minute).Leases[0].FencingToken)
		e.advance(time.Minute)
		e.remove(req(i), e.now())
		e.advance(ms)
	}
	page, err := e.s.NodeHistory(e.ctx, 0, 0, 3)
	e.must(err, "NodeHistory")
	if len(page) != 3 || page[0].Token != tokens[4] || page[2].Token != tokens[2] {
		t.Fatalf("first page = %s", fmtRecords(page))
	}
	page, err = e.s.NodeHistory(e.ctx, 0, page[2].Token, 3)
	e.must(err, "NodeHistory")
	if len(page) != 2 || page[0].Token != tokens[1] || page[1].Token != tokens[0] {
		t.Fatalf("second page = %s", fmtRecords(page))
	}
	if page, err := e.s.NodeHistory(e.ctx, 0, tokens[0], 3); err != nil || len(page) != 0 {
		t.Fatalf("past the oldest: %s, %v", fmtRecords(page), err)
	}
}

// testHistoryPrune: records that ended before the cut go, oldest first, up to
// the limit; held ones stay whatever their age.
func testHistoryPrune(t *testing.T, open Factory) {
	e := setup(t, open, 3)
	held := e.alloc(req(9), 1, 24*time.Hour).Leases[0]
	var ended []time.Time
	for i := 1; i <= 4; i++ {
		e.alloc(req(i), 1, time.Hour)
		e.advance(time.Minute)
		e.remove(req(i), e.now())
		ended = append(ended, e.now())
	}
	n, err := e.s.PruneHistory(e.ctx, ended[3], 2)
	e.must(err, "PruneHistory")
	if n != 2 || e.historyCount() != 3 {
		t.Fatalf("PruneHistory(limit 2) = %d, count %d", n, e.historyCount())
	}
	n, err = e.s.PruneHistory(e.ctx, ended[3], 10)
	e.must(err, "PruneHistory")
	if n != 1 || e.historyCount() != 2 {
		t.Fatalf("PruneHistory before the last end = %d, count %d", n, e.historyCount())
	}
	n, err = e.s.PruneHistory(e.ctx, e.now().Add(1000*time.Hour), 10)
	e.must(err, "PruneHistory")
	if n != 1 || e.historyCount() != 1 {
		t.Fatalf("PruneHistory of everything ended = %d, count %d", n, e.historyCount())
	}
	e.checkHistory([]idkeeper.Lease{held})
	page, err := e.s.NodeHistory(e.ctx, held.NodeID, 0, 10)
	e.must(err, "NodeHistory")
	if len(page) != 1 || page[0].Token != held.FencingToken {
		t.Fatalf("NodeHistory after pruning = %s", fmtRecords(page))
	}
}

func testHistoryBadArgs(t *testing.T, open Factory) {
	e := setup(t, open, 1)
	for _, n := range []int{0, -1, idkeeper.MaxHistoryPage + 1} {
		_, err := e.s.NodeHistory(e.ctx, 0, 0, n)
		wantCode(t, err, protocol.CodeInvalidRequest)
	}
	for _, n := range []int{0, idkeeper.MaxHistoryPrune + 1} {
		_, err := e.s.PruneHistory(e.ctx, e.now(), n)
		wantCode(t, err, protocol.CodeInvalidRequest)
	}
	_, err := e.s.Alloc(e.ctx, e.guard(), idkeeper.AllocParams{Requester: req(1), KeyID: keyA, Count: 1, First: time.Minute,
		Client: idkeeper.ClientInfo{Labels: map[string]string{"bad key": "x"}}})
	wantCode(t, err, protocol.CodeInvalidRequest)
	if n := e.historyCount(); n != 0 {
		t.Fatalf("a refused Alloc wrote %d records", n)
	}
	for _, node := range []idkeeper.NodeID{-1, 1, 1 << 30} {
		if hs, err := e.s.LeaseAt(e.ctx, node, e.now()); err != nil || len(hs) != 0 {
			t.Fatalf("LeaseAt(%d) outside the pool = %v, %v; want none", node, hs, err)
		}
	}
}

func cloneHistory(h idkeeper.HistoryRecord) idkeeper.HistoryRecord {
	h.Client.Labels = maps.Clone(h.Client.Labels)
	return h
}

func fmtRecords(hs []idkeeper.HistoryRecord) string {
	s := ""
	for _, h := range hs {
		s += fmt.Sprintf("\n  node %d token %d req %s key %s client %+v granted %s window %s..%s end %q at %s minted %s fromReceipt %v",
			h.NodeID, h.Token, h.Requester, h.KeyID, h.Client, fmtTime(h.GrantedAt), fmtTime(h.NotBefore), fmtTime(h.WindowEnd),
			h.End, fmtTime(h.EndedAt), fmtTime(h.MintedUpTo), h.FromReceipt)
	}
	if s == "" {
		return "(none)"
	}
	return s
}
