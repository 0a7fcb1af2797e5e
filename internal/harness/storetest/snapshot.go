package storetest

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/account"
	"github.com/idkeeper/idkeeper/allowlist"
	"github.com/idkeeper/idkeeper/audit"
	"github.com/idkeeper/idkeeper/protocol"
	"github.com/idkeeper/idkeeper/snapshot"
)

// RunSnapshot runs the contract suite of snapshot.Store as subtests of t,
// sentence by sentence of its doc comments and of RestorePlan's. The stores open
// returns must implement snapshot.Store and account.Store too; the
// suite fails when they do not.
func RunSnapshot(t *testing.T, open Factory) {
	for _, c := range []testCase{
		{"RoundTrip", testSnapshotRoundTrip},
		{"FreeOrderAfterLoad", testSnapshotFreeOrder},
		{"ReplacesEverything", testSnapshotReplaces},
		{"AllOrNothing/SourceFails", testSnapshotSourceFails},
		{"AllOrNothing/Invalid", testSnapshotInvalid},
		{"NotInitialised", testSnapshotNotInitialised},
		{"EmitError", testSnapshotEmitError},
		{"ConsistentView", testSnapshotConsistent},
		{"RestorePlan", testSnapshotRestorePlan},
		{"Large", testSnapshotLarge},
		{"Pool", testSnapshotPool},
		{"DropsCoolingCharges", testSnapshotDropsCharges},
		{"KeepsBackupSchedule", testSnapshotKeepsSchedule},
	} {
		t.Run(c.name, func(t *testing.T) { c.fn(t, open) })
	}
}

// snapStore is what RunSnapshot needs of a store.
type snapStore interface {
	idkeeper.Store
	snapshot.Store
	account.Store
}

func (e *env) snap() snapStore {
	e.t.Helper()
	s, ok := e.s.(snapStore)
	if !ok {
		e.t.Fatalf("%T does not implement snapshot.Store and account.Store", e.s)
	}
	return s
}

// storeState is a snapshot read whole, for tests.
type storeState struct {
	meta snapshot.Meta
	recs []snapshot.Record
}

// readSnapshot reads the store's snapshot and checks that it is one: meta once,
// before the records, and records a snapshot.Checker accepts.
func (e *env) readSnapshot() storeState {
	e.t.Helper()
	var sn storeState
	metas := 0
	err := e.snap().ReadSnapshot(e.ctx, func(m snapshot.Meta) error {
		if metas++; len(sn.recs) > 0 {
			e.t.Errorf("ReadSnapshot called meta after %d records", len(sn.recs))
		}
		sn.meta = m
		return nil
	}, func(r snapshot.Record) error {
		if metas != 1 {
			e.t.Errorf("ReadSnapshot emitted a record after %d calls of meta", metas)
		}
		sn.recs = append(sn.recs, r)
		return nil
	})
	e.must(err, "ReadSnapshot")
	if metas != 1 {
		e.t.Fatalf("ReadSnapshot called meta %d times", metas)
	}
	chk, err := snapshot.NewChecker(sn.meta)
	e.must(err, "the meta ReadSnapshot gave")
	for i, r := range sn.recs {
		e.must(chk.Check(r), fmt.Sprintf("record %d ReadSnapshot gave (%s)", i, fmtRecord(r)))
	}
	e.must(chk.Done(), "the end of the snapshot ReadSnapshot gave")
	if st := e.status(); st.Generation != sn.meta.Generation || st.Fence != sn.meta.Fence || st.Pool.Nodes != sn.meta.Nodes ||
		st.Pool.First != sn.meta.First || !idkeeper.SameLayout(st.Pool.LayoutOrDefault(), sn.meta.Pool().LayoutOrDefault()) {
		e.t.Fatalf("snapshot meta %s, but Status says %+v", fmtMeta(sn.meta), st)
	}
	return sn
}

// load loads sn into the store and adopts its meta.
func (e *env) load(sn storeState) {
	e.t.Helper()
	e.must(e.snap().LoadSnapshot(e.ctx, sn.meta, newSource(sn.recs, -1, nil)), "LoadSnapshot")
	e.adopt(sn.meta)
}

// adopt makes the env track a store that holds meta, freshly loaded: its free
// order is NodeID order, which the env knows nothing of.
func (e *env) adopt(meta snapshot.Meta) {
	e.gen, e.fence, e.first, e.nodes = meta.Generation, meta.Fence, meta.First, meta.Nodes
	e.frees, e.rank = 0, map[idkeeper.NodeID]int{}
}

// source is a snapshot.Source of records; it fails with err at record failAt (never
// when failAt < 0) instead of returning it.
type source struct {
	recs   []snapshot.Record
	i      int
	failAt int
	err    error
}

func newSource(recs []snapshot.Record, failAt int, err error) *source {
	return &source{recs: recs, failAt: failAt, err: err}
}

func (s *source) Next() (snapshot.Record, error) {
	if s.i == s.failAt {
		return snapshot.Record{}, s.err
	}
	if s.i >= len(s.recs) {
		return snapshot.Record{}, io.EOF
	}
	s.i++
	return s.recs[s.i-1], nil
}

func fmtMeta(m snapshot.Meta) string {
	return fmt.Sprintf("{generation %s #%d %s at %s, fence %d, pool %s, audit head %d %q}", m.Generation.ID,
		m.Generation.Number, m.Generation.Origin, fmtTime(m.Generation.At), m.Fence, m.Pool(), m.AuditSeq, m.AuditHash)
}

func fmtNode(n idkeeper.NodeState) string {
	lease := "free"
	if n.Lease != nil {
		lease = fmtLease(*n.Lease)
	}
	return fmt.Sprintf("node %d: watermark %s floor %s quarantined until %s last token %d restorable %v, %s", n.NodeID,
		fmtTime(n.Watermark), fmtTime(n.Floor), fmtTime(n.QuarantinedUntil), n.LastToken, n.Restorable, lease)
}

func fmtKey(k idkeeper.APIKey) string {
	return fmt.Sprintf("key %q: hash %x %q created %s by %q expires %s maxNodes %d bootstrap %v admin %v revoked %s used %s",
		k.ID, k.Hash, k.Description, fmtTime(k.CreatedAt), k.CreatedBy, fmtTime(k.ExpiresAt), k.MaxNodes, k.Bootstrap,
		k.Admin, fmtTime(k.RevokedAt), fmtTime(k.LastUsedAt))
}

func fmtUser(u account.User) string {
	return fmt.Sprintf("user %q: %s %q disabled %v created %s by %q epoch %d password changed %s login %s version %d",
		u.Name, u.Role, u.PasswordHash, u.Disabled, fmtTime(u.CreatedAt), u.CreatedBy, u.Epoch,
		fmtTime(u.PasswordChangedAt), fmtTime(u.LastLoginAt), u.Version)
}

func fmtAllow(a allowlist.Entry) string {
	return fmt.Sprintf("allow %s: %q by %q at %s", a.Prefix, a.Note, a.CreatedBy, fmtTime(a.CreatedAt))
}

func fmtAudit(a audit.Entry) string {
	return fmt.Sprintf("audit %d at %s: %q %q %q %q %q prev %s hash %s", a.Seq, fmtTime(a.At), a.Actor, a.Action,
		a.Target, a.RemoteIP, a.Detail, a.Prev, a.Hash)
}

// fmtRecord spells out every field of a record, times to the microsecond, so that
// two records are the same exactly when their strings are.
func fmtRecord(r snapshot.Record) string {
	var parts []string
	if r.Node != nil {
		parts = append(parts, fmtNode(*r.Node))
	}
	if r.Key != nil {
		parts = append(parts, fmtKey(*r.Key))
	}
	if r.User != nil {
		parts = append(parts, fmtUser(*r.User))
	}
	if r.Allow != nil {
		parts = append(parts, fmtAllow(*r.Allow))
	}
	if r.Audit != nil {
		parts = append(parts, fmtAudit(*r.Audit))
	}
	if r.History != nil {
		parts = append(parts, "history"+fmtRecords([]idkeeper.HistoryRecord{*r.History})+fmt.Sprintf(" labels %v", r.History.Client.Labels))
	}
	return fmt.Sprint(parts)
}

// wantSameSnapshot checks that got and want hold the same meta and records.
func wantSameSnapshot(t *testing.T, what string, got, want storeState) {
	t.Helper()
	if fmtMeta(got.meta) != fmtMeta(want.meta) {
		t.Fatalf("%s: meta\n got %s\nwant %s", what, fmtMeta(got.meta), fmtMeta(want.meta))
	}
	for i := range max(len(got.recs), len(want.recs)) {
		g, w := "none", "none"
		if i < len(got.recs) {
			g = fmtRecord(got.recs[i])
		}
		if i < len(want.recs) {
			w = fmtRecord(want.recs[i])
		}
		if g != w {
			t.Fatalf("%s: record %d of %d (want %d)\n got %s\nwant %s", what, i, len(got.recs), len(want.recs), g, w)
		}
	}
}

// count returns how many records of sn satisfy ok.
func (sn storeState) count(ok func(snapshot.Record) bool) int {
	n := 0
	for _, r := range sn.recs {
		if ok(r) {
			n++
		}
	}
	return n
}

func isAudit(r snapshot.Record) bool   { return r.Audit != nil }
func isHistory(r snapshot.Record) bool { return r.History != nil }
func isLease(r snapshot.Record) bool   { return r.Node != nil && r.Node.Lease != nil }
func isFree(r snapshot.Record) bool    { return r.Node != nil && r.Node.Lease == nil }

// first returns the index of the first record that satisfies ok.
func (sn storeState) first(ok func(snapshot.Record) bool) int {
	i := slices.IndexFunc(sn.recs, ok)
	if i < 0 {
		panic("storetest: the snapshot holds no such record")
	}
	return i
}

// richState opens a store and brings it, through the public methods, into a state
// with every kind of record: a reset's floors and restorable nodes, leases of
// several keys and requesters (renewed, in grace, quarantined while held), free
// nodes ready, cooling and quarantined (a revoked lease among them), API keys
// revoked, expiring, with a quota, admin and bootstrap, users (one updated),
// a session, allow-list entries and an audit log whose first entries were pruned;
// a skew observation and a job lock too, which are not part of a snapshot.
func richState(t *testing.T, open Factory) *env {
	t.Helper()
	e := setup(t, open, 12)
	s := e.snap()
	e.afterReset(0, e.now().Add(5*time.Minute))
	e.advance(6 * time.Minute)
	now := e.now()

	ka := newKey(keyA, now, "")
	kb := newKey("key-b", now, idkeeper.CreatedByUser("alice"))
	kc := newKey("key-c", now, idkeeper.CreatedByCLI)
	kd := newKey("key-d", now, idkeeper.CreatedByKey("key-e"))
	kd.ExpiresAt, kd.MaxNodes = now.Add(30*24*time.Hour), 4
	ke := newKey("key-e", now, idkeeper.CreatedByEnv)
	ke.Admin, ke.Bootstrap = true, true
	for _, k := range []idkeeper.APIKey{ka, kb, kc, kd, ke} {
		e.must(s.CreateAPIKey(e.ctx, k), "CreateAPIKey "+k.ID)
	}
	e.must(s.RevokeAPIKey(e.ctx, "key-c", now), "RevokeAPIKey")
	e.must(s.TouchAPIKey(e.ctx, keyA, now.Add(time.Second)), "TouchAPIKey")

	e.alloc(req(1), 2, 10*time.Minute)
	e.allocP(idkeeper.AllocParams{Requester: req(2), KeyID: "key-b", Count: 3, First: 10 * time.Minute,
		Client: idkeeper.ClientInfo{Host: "web-2", Labels: map[string]string{"service": "orders", "version": "2.1"}}})
	e.allocP(idkeeper.AllocParams{Requester: req(3), KeyID: "key-d", Count: 1, First: 10 * time.Minute, MaxNodes: 4})
	e.alloc(req(4), 1, 10*time.Minute)
	e.alloc(req(5), 2, 10*time.Minute)
	e.alloc(req(6), 1, time.Minute) // left to expire: in grace
	e.advance(time.Minute)
	e.renew(req(1), 48*time.Hour)
	e.remove(req(4), e.now()) // ready
	e.remove(req(5), time.Time{})
	l := e.heldBy(req(2))[0]
	if _, err := s.RevokeLease(e.ctx, e.guard(), l.NodeID, l.FencingToken, 10*time.Minute); err != nil {
		t.Fatalf("RevokeLease: %v", err)
	}
	e.freed([]idkeeper.Lease{l})
	e.check()
	var free idkeeper.NodeID = -1
	for id := range e.nodes {
		if st := e.node(idkeeper.NodeID(id)); st.Lease == nil && !st.QuarantinedUntil.After(e.now()) {
			free = idkeeper.NodeID(id)
			break
		}
	}
	e.quarantine(e.now().Add(2*time.Hour), free, e.heldBy(req(1))[0].NodeID)
	e.advance(2 * time.Minute)
	e.check()

	alice, bob := user("alice", account.RoleAdmin), user("bob", account.RoleViewer)
	e.must(s.CreateUser(e.ctx, alice), "CreateUser alice")
	e.must(s.CreateUser(e.ctx, bob), "CreateUser bob")
	bob.Version, bob.Disabled, bob.Epoch, bob.LastLoginAt = 1, true, 2, now
	e.must(s.UpdateUser(e.ctx, bob), "UpdateUser bob")
	e.must(s.CreateSession(e.ctx, session("s-alice", "alice", now)), "CreateSession")
	for _, p := range []string{"10.0.0.0/8", "2001:db8::/32", "192.0.2.0/24"} {
		e.must(s.AddAllowEntry(e.ctx, allowlist.Entry{Prefix: netip.MustParsePrefix(p), Note: "office " + p,
			CreatedBy: "alice", CreatedAt: now}), "AddAllowEntry")
	}
	for i := range 5 {
		appendAudit(t, s, now.Add(time.Duration(i-5)*time.Hour), audit.LeaseGrant)
	}
	if n, err := s.PruneAudit(e.ctx, now.Add(-3*time.Hour-30*time.Minute), 100); err != nil || n != 2 {
		t.Fatalf("PruneAudit = %d, %v; want 2", n, err)
	}
	e.must(s.RecordSkew(e.ctx, idkeeper.SkewObservation{Requester: req(1), Skew: time.Second, Threshold: 10 * time.Minute,
		Level: idkeeper.SkewOK, ObservedAt: now, Operation: "alloc"}, 24*time.Hour), "RecordSkew")
	if _, ok, err := s.TryLock(e.ctx, "cleanup", "replica-1", 24*time.Hour); err != nil || !ok {
		t.Fatalf("TryLock = %v, %v", ok, err)
	}
	return e
}

// otherState opens a store, on e's clock's time, with a state of its own that
// shares nothing with richState's but a user name: a larger pool, its own
// generation, key, leases, users, sessions, allow-list entry and audit log.
func otherState(t *testing.T, open Factory, at time.Time) *env {
	t.Helper()
	f := setup(t, open, 20)
	f.clock.Set(at)
	s := f.snap()
	now := f.now()
	f.must(s.CreateAPIKey(f.ctx, newKey("key-z", now, "")), "CreateAPIKey")
	f.allocP(idkeeper.AllocParams{Requester: req(9), KeyID: "key-z", Count: 5, First: time.Hour})
	f.quarantine(now.Add(time.Hour), 19)
	f.must(s.CreateUser(f.ctx, user("zed", account.RoleOperator)), "CreateUser")
	f.must(s.CreateUser(f.ctx, user("alice", account.RoleViewer)), "CreateUser")
	f.must(s.CreateSession(f.ctx, session("s-zed", "zed", now)), "CreateSession")
	f.must(s.CreateSession(f.ctx, session("s-alice-2", "alice", now)), "CreateSession")
	f.must(s.AddAllowEntry(f.ctx, allowlist.Entry{Prefix: netip.MustParsePrefix("172.16.0.0/12"), CreatedAt: now}), "AddAllowEntry")
	for range 3 {
		appendAudit(t, s, now, audit.Login)
	}
	if _, ok, err := s.TryLock(f.ctx, "retention", "replica-2", 24*time.Hour); err != nil || !ok {
		t.Fatalf("TryLock = %v, %v", ok, err)
	}
	f.must(s.RecordSkew(f.ctx, idkeeper.SkewObservation{Requester: req(8), Skew: -time.Second, Threshold: time.Minute,
		Level: idkeeper.SkewOK, ObservedAt: now, Operation: "renew"}, 24*time.Hour), "RecordSkew")
	return f
}

// wantSameState checks that the stores of a and b answer every read alike.
func wantSameState(t *testing.T, a, b *env) {
	t.Helper()
	sa, sb := a.snap(), b.snap()
	if ca, cb := a.counts(), b.counts(); !ca.Equal(cb) {
		t.Fatalf("Counts: %+v and %+v", ca, cb)
	}
	wantSameLeases(t, "Leases", b.leases(), a.leases())
	if a.first != b.first {
		t.Fatalf("pools from %d and from %d", a.first, b.first)
	}
	for i := range max(a.nodes, b.nodes) {
		id := a.first + idkeeper.NodeID(i)
		if na, nb := fmtNode(a.node(id)), fmtNode(b.node(id)); na != nb {
			t.Fatalf("Node(%d):\n%s\n%s", id, na, nb)
		}
	}
	ha, err := sa.KeyHoldings(a.ctx)
	a.must(err, "KeyHoldings")
	hb, err := sb.KeyHoldings(b.ctx)
	b.must(err, "KeyHoldings")
	if fmt.Sprint(ha) != fmt.Sprint(hb) {
		t.Fatalf("KeyHoldings: %v and %v", ha, hb)
	}
	same := func(what string, read func(e *env, s snapStore) (string, error)) {
		t.Helper()
		x, err := read(a, sa)
		a.must(err, what)
		y, err := read(b, sb)
		b.must(err, what)
		if x != y {
			t.Fatalf("%s:\n%s\n%s", what, x, y)
		}
	}
	same("APIKeys", func(e *env, s snapStore) (string, error) {
		ks, err := s.APIKeys(e.ctx)
		var out []string
		for _, k := range ks {
			out = append(out, fmtKey(k))
		}
		return fmt.Sprint(out), err
	})
	same("Users", func(e *env, s snapStore) (string, error) {
		us, err := s.Users(e.ctx)
		var out []string
		for _, u := range us {
			out = append(out, fmtUser(u))
		}
		return fmt.Sprint(out), err
	})
	same("AllowEntries", func(e *env, s snapStore) (string, error) {
		es, err := s.AllowEntries(e.ctx)
		var out []string
		for _, x := range es {
			out = append(out, fmtAllow(x))
		}
		return fmt.Sprint(out), err
	})
	same("AuditEntries", func(e *env, s snapStore) (string, error) {
		es, err := s.AuditEntries(e.ctx, 0, 1000)
		var out []string
		for _, x := range es {
			out = append(out, fmtAudit(x))
		}
		seq, hash, err2 := s.AuditHead(e.ctx)
		return fmt.Sprint(out, seq, hash), errors.Join(err, err2)
	})
	same("Status", func(e *env, s snapStore) (string, error) {
		st, err := s.Status(e.ctx)
		return fmt.Sprint(st.Initialised, st.Generation, st.Fence, st.Pool), err
	})
}

// wantSameGrant checks that two grants hold the same leases, tokens included;
// with anyTokenOrder, the same tokens in any assignment to the node IDs (a grant
// of many node IDs numbers them in the order it picks them).
func wantSameGrant(t *testing.T, what string, ga, gb idkeeper.Grant, anyTokenOrder bool) {
	t.Helper()
	if ga.Fence != gb.Fence || !ga.Now.Equal(gb.Now) || fmt.Sprint(ga.Restored, ga.Contested) != fmt.Sprint(gb.Restored, gb.Contested) {
		t.Fatalf("%s: grants %+v and %+v", what, ga, gb)
	}
	if len(ga.Leases) != len(gb.Leases) {
		t.Fatalf("%s: %d and %d leases", what, len(ga.Leases), len(gb.Leases))
	}
	var ta, tb []uint64
	for i := range ga.Leases {
		la, lb := ga.Leases[i], gb.Leases[i]
		ta, tb = append(ta, la.FencingToken), append(tb, lb.FencingToken)
		if anyTokenOrder {
			lb.FencingToken = la.FencingToken
		}
		wantLease(t, what, lb, la)
	}
	slices.Sort(ta)
	slices.Sort(tb)
	if !slices.Equal(ta, tb) {
		t.Fatalf("%s: tokens %v and %v", what, ta, tb)
	}
}

func (e *env) renewKey(r idkeeper.Requester, key string, d time.Duration) idkeeper.Grant {
	e.t.Helper()
	g, err := e.s.Renew(e.ctx, e.guard(), idkeeper.RenewParams{Requester: r, KeyID: key, Duration: d})
	e.must(err, fmt.Sprintf("Renew(%s, %s)", r, key))
	return g
}

// testSnapshotRoundTrip: a snapshot loaded into a new store reads back the same,
// and the loaded store answers every read and every lease call as the original.
func testSnapshotRoundTrip(t *testing.T, open Factory) {
	e := richState(t, open)
	sn := e.readSnapshot()
	if sn.count(isLease) < 4 || sn.count(isFree) < 4 || sn.count(isAudit) != 3 || sn.meta.AuditSeq != 5 {
		t.Fatalf("the rich state's snapshot lacks records: %d leases, %d free nodes, %d audit entries up to %d",
			sn.count(isLease), sn.count(isFree), sn.count(isAudit), sn.meta.AuditSeq)
	}
	again := e.readSnapshot()
	wantSameSnapshot(t, "a second snapshot of an unchanged store", again, sn)

	f := openEnv(t, open)
	f.clock.Set(e.clock.Now())
	f.load(sn)
	wantSameSnapshot(t, "the snapshot of the loaded store", f.readSnapshot(), sn)
	f.check()
	wantSameState(t, e, f)

	// The loaded store grants and renews as the original does.
	wantSameGrant(t, "Renew", e.renew(req(1), 48*time.Hour), f.renew(req(1), 48*time.Hour), false)
	wantSameGrant(t, "Renew of key-b", e.renewKey(req(2), "key-b", time.Hour), f.renewKey(req(2), "key-b", time.Hour), false)
	ga, err := e.allocRaw(req(1), 2, time.Minute)
	e.must(err, "idempotent Alloc")
	gb, err := f.allocRaw(req(1), 2, time.Minute)
	f.must(err, "idempotent Alloc")
	wantSameGrant(t, "idempotent Alloc", ga, gb, false)
	wantSameState(t, e, f)
	c := e.counts()
	ga, gb = e.alloc(req(7), c.Remaining, 10*time.Minute), f.alloc(req(7), c.Remaining, 10*time.Minute)
	wantSameGrant(t, "Alloc of every allocatable node ID", ga, gb, true)
	e.wantExhausted(req(8), 1, 0)
	f.wantExhausted(req(8), 1, 0)
	wantSameCounts(t, e, f)

	// Once every quarantine has ended and every lease expired.
	e.advance(50 * time.Hour)
	f.clock.Set(e.clock.Now())
	if ne, nf := e.reclaim(10*time.Minute), f.reclaim(10*time.Minute); ne != nf {
		t.Fatalf("Reclaim: %d and %d", ne, nf)
	}
	c = e.counts()
	if c.Remaining != e.nodes {
		t.Fatalf("Counts after every lease ended: %+v", c)
	}
	ga, gb = e.alloc(req(8), c.Remaining, 10*time.Minute), f.alloc(req(8), c.Remaining, 10*time.Minute)
	wantSameGrant(t, "Alloc of the whole pool", ga, gb, true)
	e.remove(req(8), e.now())
	f.remove(req(8), f.now())
	wantSameCounts(t, e, f)
}

// wantSameCounts checks that the stores of a and b count alike and that their
// keys hold as many node IDs: what two stores that granted the same node IDs
// with their tokens numbered in another order still share.
func wantSameCounts(t *testing.T, a, b *env) {
	t.Helper()
	if ca, cb := a.counts(), b.counts(); !ca.Equal(cb) {
		t.Fatalf("Counts: %+v and %+v", ca, cb)
	}
	ha, err := a.snap().KeyHoldings(a.ctx)
	a.must(err, "KeyHoldings")
	hb, err := b.snap().KeyHoldings(b.ctx)
	b.must(err, "KeyHoldings")
	if fmt.Sprint(ha) != fmt.Sprint(hb) {
		t.Fatalf("KeyHoldings: %v and %v", ha, hb)
	}
}

// testSnapshotFreeOrder: a snapshot does not keep the free order; a loaded store
// hands out its free node IDs in NodeID order.
func testSnapshotFreeOrder(t *testing.T, open Factory) {
	e := richState(t, open)
	sn := e.readSnapshot()
	f := openEnv(t, open)
	f.clock.Set(e.clock.Now())
	f.load(sn)
	f.advance(3 * time.Hour) // every quarantine ended, every watermark passed
	var free []idkeeper.NodeID
	for _, r := range sn.recs {
		if isFree(r) {
			free = append(free, r.Node.NodeID)
		}
	}
	for i, want := range free {
		if got := f.allocOne(req(20+i), time.Hour); got != want {
			t.Fatalf("grant %d after a load took node %d, want %d (free nodes %v)", i, got, want, free)
		}
	}
}

// testSnapshotReplaces: LoadSnapshot over a store with a state of its own leaves
// nothing of it: pool, generation, fencing counter, leases, keys, users, allow-list
// and audit log are the snapshot's; every session is gone; job locks and skew
// observations stay.
func testSnapshotReplaces(t *testing.T, open Factory) {
	e := richState(t, open)
	sn := e.readSnapshot()
	f := otherState(t, open, e.clock.Now())
	old := f.guard()
	locks, err := f.snap().Locks(f.ctx)
	f.must(err, "Locks")
	skews, err := f.snap().SkewObservations(f.ctx)
	f.must(err, "SkewObservations")

	f.load(sn)
	wantSameSnapshot(t, "the snapshot of the replaced store", f.readSnapshot(), sn)
	f.check() // Node(12) of the smaller pool is ErrNotFound
	wantSameState(t, e, f)
	s := f.snap()
	if _, err := s.Alloc(f.ctx, old, idkeeper.AllocParams{Requester: req(10), KeyID: keyA, Count: 1, First: time.Minute}); !errors.Is(err, idkeeper.ErrStoreReset) {
		t.Fatalf("Alloc under the replaced generation: %v, want ErrStoreReset", err)
	}
	for _, id := range []idkeeper.NodeID{12, 19} {
		if _, err := s.Node(f.ctx, id); !errors.Is(err, idkeeper.ErrNotFound) {
			t.Fatalf("Node(%d) after loading a pool of 12: %v", id, err)
		}
	}
	if _, err := s.APIKey(f.ctx, "key-z"); !errors.Is(err, idkeeper.ErrNotFound) {
		t.Fatalf("APIKey(key-z) after the load: %v", err)
	}
	if _, err := s.User(f.ctx, "zed"); !errors.Is(err, idkeeper.ErrNotFound) {
		t.Fatalf("User(zed) after the load: %v", err)
	}
	for _, id := range []string{"s-zed", "s-alice-2"} {
		if _, err := s.Session(f.ctx, id); !errors.Is(err, idkeeper.ErrNotFound) {
			t.Fatalf("Session(%s) after the load: %v", id, err)
		}
	}
	if n, err := s.DeleteUserSessions(f.ctx, "alice"); err != nil || n != 0 {
		t.Fatalf("DeleteUserSessions(alice) after the load = %d, %v; want 0", n, err)
	}
	if n, err := s.PruneSessions(f.ctx, f.now().Add(100*time.Hour), time.Hour); err != nil || n != 0 {
		t.Fatalf("PruneSessions after the load = %d, %v; want 0", n, err)
	}
	f.wantLocks("locks after the load", locks...)
	f.wantSkews(skews...)
	// The replaced store goes on from the snapshot's head.
	appendAudit(t, s, f.now(), audit.Login)
	if seq, _, err := s.AuditHead(f.ctx); err != nil || seq != sn.meta.AuditSeq+1 {
		t.Fatalf("AuditHead after an append = %d, %v; want %d", seq, err, sn.meta.AuditSeq+1)
	}
	f.must(s.CreateSession(f.ctx, session("s-zed", "alice", f.now())), "CreateSession with a deleted session's ID")
}

// wantUntouched checks that f's store holds before and its sessions.
func wantUntouched(t *testing.T, what string, f *env, before storeState) {
	t.Helper()
	wantSameSnapshot(t, what, f.readSnapshot(), before)
	for _, id := range []string{"s-zed", "s-alice-2"} {
		if _, err := f.snap().Session(f.ctx, id); err != nil {
			t.Fatalf("%s: Session(%s): %v", what, id, err)
		}
	}
	f.check()
}

// testSnapshotSourceFails: a source that fails, anywhere, leaves the store as it
// was, and LoadSnapshot returns its error.
func testSnapshotSourceFails(t *testing.T, open Factory) {
	e := richState(t, open)
	sn := e.readSnapshot()
	f := otherState(t, open, e.clock.Now())
	before := f.readSnapshot()
	boom := errors.New("the backup file is truncated")
	audit := sn.first(isAudit)
	for _, n := range []int{0, 1, sn.meta.Nodes - 1, sn.meta.Nodes, audit + 1, len(sn.recs)} {
		err := f.snap().LoadSnapshot(f.ctx, sn.meta, newSource(sn.recs, n, boom))
		if !errors.Is(err, boom) {
			t.Fatalf("LoadSnapshot with a source failing at record %d: %v, want the source's error", n, err)
		}
		wantUntouched(t, fmt.Sprintf("a source failing at record %d", n), f, before)
	}
}

// clone copies a snapshot deeply enough to change any field of a copy.
func (sn storeState) clone() storeState {
	out := storeState{meta: sn.meta, recs: make([]snapshot.Record, len(sn.recs))}
	for i, r := range sn.recs {
		switch {
		case r.Node != nil:
			n := *r.Node
			if n.Lease != nil {
				l := *n.Lease
				n.Lease = &l
			}
			r.Node = &n
		case r.Key != nil:
			k := *r.Key
			r.Key = &k
		case r.User != nil:
			u := *r.User
			r.User = &u
		case r.Allow != nil:
			a := *r.Allow
			r.Allow = &a
		case r.Audit != nil:
			a := *r.Audit
			r.Audit = &a
		case r.History != nil:
			h := cloneHistory(*r.History)
			r.History = &h
		}
		out.recs[i] = r
	}
	return out
}

// testSnapshotInvalid: a snapshot whose meta or records are invalid is refused
// with an INVALID_REQUEST Error and changes nothing.
func testSnapshotInvalid(t *testing.T, open Factory) {
	e := richState(t, open)
	sn := e.readSnapshot()
	f := otherState(t, open, e.clock.Now())
	before := f.readSnapshot()
	nodes := sn.meta.Nodes
	lease := sn.first(isLease)
	audit := sn.first(isAudit)
	key := sn.first(func(r snapshot.Record) bool { return r.Key != nil })
	user := sn.first(func(r snapshot.Record) bool { return r.User != nil })
	allow := sn.first(func(r snapshot.Record) bool { return r.Allow != nil })
	hist := sn.first(isHistory)
	// Two leases of one requester.
	var pair []int
	for i, r := range sn.recs {
		if isLease(r) && r.Node.Lease.Requester.Key() == req(1).Key() {
			pair = append(pair, i)
		}
	}
	if len(pair) != 2 {
		t.Fatalf("requester 1 holds %d leases in the snapshot, want 2", len(pair))
	}
	for _, c := range []struct {
		name   string
		change func(sn *storeState)
	}{
		{"no generation", func(sn *storeState) { sn.meta.Generation.ID = "" }},
		{"generation 0", func(sn *storeState) { sn.meta.Generation.Number = 0 }},
		{"unknown origin", func(sn *storeState) { sn.meta.Generation.Origin = "restored" }},
		{"pool of 0", func(sn *storeState) { sn.meta.Nodes = 0 }},
		{"fence past the ceiling", func(sn *storeState) { sn.meta.Fence = idkeeper.MaxFencingToken + 1 }},
		{"audit head half set", func(sn *storeState) { sn.meta.AuditHash = "" }},
		{"pool smaller than its nodes", func(sn *storeState) { sn.meta.Nodes-- }},
		{"pool larger than its nodes", func(sn *storeState) { sn.meta.Nodes++ }},
		{"node outside the pool", func(sn *storeState) { sn.recs[nodes-1].Node.NodeID = idkeeper.NodeID(nodes) }},
		{"negative node", func(sn *storeState) { sn.recs[0].Node.NodeID = -1 }},
		{"node repeated", func(sn *storeState) { sn.recs = slices.Insert(sn.recs, 3, sn.recs[2]) }},
		{"node missing", func(sn *storeState) { sn.recs = slices.Delete(sn.recs, 4, 5) }},
		{"nodes out of order", func(sn *storeState) { sn.recs[3], sn.recs[4] = sn.recs[4], sn.recs[3] }},
		{"lease in the wrong node", func(sn *storeState) { sn.recs[lease].Node.Lease.NodeID++ }},
		{"lease token past the fence", func(sn *storeState) { sn.recs[lease].Node.Lease.FencingToken = sn.meta.Fence + 1 }},
		{"lease token 0", func(sn *storeState) { sn.recs[lease].Node.Lease.FencingToken = 0 }},
		{"last token past the fence", func(sn *storeState) { sn.recs[0].Node.LastToken = sn.meta.Fence + 1 }},
		{"lease of an invalid requester", func(sn *storeState) { sn.recs[lease].Node.Lease.Requester.PID = 0 }},
		{"requester of two API keys", func(sn *storeState) { sn.recs[pair[1]].Node.Lease.KeyID = "key-b" }},
		{"empty record", func(sn *storeState) { sn.recs = slices.Insert(sn.recs, key, snapshot.Record{}) }},
		{"two records in one", func(sn *storeState) { sn.recs[key].User = sn.recs[user].User }},
		{"key before the nodes", func(sn *storeState) { sn.recs = slices.Insert(sn.recs, 0, sn.recs[key]) }},
		{"node after the keys", func(sn *storeState) { sn.recs = slices.Insert(sn.recs, key+1, sn.recs[0]) }},
		{"key repeated", func(sn *storeState) { sn.recs = slices.Insert(sn.recs, key+1, sn.recs[key]) }},
		{"key without ID", func(sn *storeState) { sn.recs[key].Key.ID = "" }},
		{"user without name", func(sn *storeState) { sn.recs[user].User.Name = "" }},
		{"user without version", func(sn *storeState) { sn.recs[user].User.Version = 0 }},
		{"users out of order", func(sn *storeState) { sn.recs[user], sn.recs[user+1] = sn.recs[user+1], sn.recs[user] }},
		{"allow entry not masked", func(sn *storeState) { sn.recs[allow].Allow.Prefix = netip.MustParsePrefix("10.1.2.3/8") }},
		{"allow entry repeated", func(sn *storeState) { sn.recs = slices.Insert(sn.recs, allow+1, sn.recs[allow]) }},
		{"audit gap", func(sn *storeState) { sn.recs = slices.Delete(sn.recs, audit+1, audit+2) }},
		{"audit out of order", func(sn *storeState) { sn.recs[audit], sn.recs[audit+1] = sn.recs[audit+1], sn.recs[audit] }},
		{"audit entry repeated", func(sn *storeState) { sn.recs = slices.Insert(sn.recs, audit+1, sn.recs[audit]) }},
		{"audit entry past the head", func(sn *storeState) { sn.meta.AuditSeq-- }},
		{"audit head past the last entry", func(sn *storeState) { sn.meta.AuditSeq++ }},
		{"audit head's hash not the last entry's", func(sn *storeState) { sn.meta.AuditHash = "00" }},
		{"audit before the allow-list", func(sn *storeState) { sn.recs = slices.Insert(sn.recs, allow, sn.recs[audit]) }},
		{"history before the audit log", func(sn *storeState) { sn.recs = slices.Insert(sn.recs, audit, sn.recs[hist]) }},
		{"history record repeated", func(sn *storeState) { sn.recs = slices.Insert(sn.recs, hist+1, sn.recs[hist]) }},
		{"history out of order", func(sn *storeState) { sn.recs[hist], sn.recs[hist+1] = sn.recs[hist+1], sn.recs[hist] }},
		{"history node outside the pool", func(sn *storeState) { sn.recs[len(sn.recs)-1].History.NodeID = idkeeper.NodeID(nodes) }},
		{"history token past the fence", func(sn *storeState) { sn.recs[len(sn.recs)-1].History.Token = sn.meta.Fence + 1 }},
		{"history token 0", func(sn *storeState) { sn.recs[hist].History.Token = 0 }},
		{"history of an invalid requester", func(sn *storeState) { sn.recs[hist].History.Requester.MachineID = "" }},
		{"history with an unknown end", func(sn *storeState) {
			sn.recs[hist].History.End, sn.recs[hist].History.EndedAt = "lost", sn.recs[hist].History.GrantedAt
		}},
		{"history held with an end time", func(sn *storeState) {
			sn.recs[hist].History.End, sn.recs[hist].History.EndedAt = idkeeper.EndHeld, sn.recs[hist].History.GrantedAt
		}},
		{"history with a bad label", func(sn *storeState) { sn.recs[hist].History.Client.Labels = map[string]string{"a b": "c"} }},
	} {
		bad := sn.clone()
		c.change(&bad)
		err := f.snap().LoadSnapshot(f.ctx, bad.meta, newSource(bad.recs, -1, nil))
		if protocol.ErrorCode(err) != protocol.CodeInvalidRequest {
			t.Fatalf("LoadSnapshot of a snapshot with %s: %v, want INVALID_REQUEST", c.name, err)
		}
		wantUntouched(t, "a snapshot with "+c.name, f, before)
	}
}

// testSnapshotNotInitialised: a store that is not initialised has no snapshot:
// STORE_NOT_INITIALISED, and neither meta nor emit is called.
func testSnapshotNotInitialised(t *testing.T, open Factory) {
	e := openEnv(t, open)
	s := e.snap()
	e.must(s.CreateUser(e.ctx, user("alice", account.RoleAdmin)), "CreateUser")
	called := false
	err := s.ReadSnapshot(e.ctx, func(snapshot.Meta) error {
		called = true
		return nil
	}, func(snapshot.Record) error {
		called = true
		return nil
	})
	wantCode(t, err, protocol.CodeStoreNotInitialised)
	if called {
		t.Fatal("ReadSnapshot of a store that is not initialised called meta or emit")
	}
}

// testSnapshotEmitError: ReadSnapshot stops at the first error of meta or emit
// and returns it.
func testSnapshotEmitError(t *testing.T, open Factory) {
	e := richState(t, open)
	sn := e.readSnapshot()
	boom := errors.New("the disk is full")
	emitted := 0
	err := e.snap().ReadSnapshot(e.ctx, func(snapshot.Meta) error { return boom },
		func(snapshot.Record) error {
			emitted++
			return nil
		})
	if !errors.Is(err, boom) || emitted != 0 {
		t.Fatalf("ReadSnapshot with a failing meta: %v after %d records, want meta's error and none", err, emitted)
	}
	for _, k := range []int{0, 1, sn.meta.Nodes, sn.first(isAudit), len(sn.recs) - 1} {
		emitted = 0
		err := e.snap().ReadSnapshot(e.ctx, func(snapshot.Meta) error { return nil },
			func(snapshot.Record) error {
				if emitted++; emitted == k+1 {
					return boom
				}
				return nil
			})
		if !errors.Is(err, boom) || emitted != k+1 {
			t.Fatalf("ReadSnapshot with emit failing at record %d: %v after %d calls, want emit's error after %d",
				k, err, emitted, k+1)
		}
	}
	wantSameSnapshot(t, "a snapshot after failed reads", e.readSnapshot(), sn)
}

// testSnapshotConsistent: ReadSnapshot reads one view of the store: writes made
// while it emits (here, once the first record is out: a grant, a key, a user, an
// audit entry appended and one pruned) are not in the snapshot. (A store whose
// writers wait for the read, as bbolt's may when its file must grow, passes too:
// the writes then come after the read.)
func testSnapshotConsistent(t *testing.T, open Factory) {
	e := richState(t, open)
	sn := e.readSnapshot()
	s := e.snap()
	g := e.guard()
	now := e.now()
	seq, hash, err := s.AuditHead(e.ctx)
	e.must(err, "AuditHead")
	write := func() error {
		if _, err := s.Alloc(e.ctx, g, idkeeper.AllocParams{Requester: req(30), KeyID: keyA, Count: 1, First: time.Hour}); err != nil {
			return err
		}
		if err := s.CreateAPIKey(e.ctx, newKey("key-0", now, "")); err != nil {
			return err
		}
		if err := s.CreateUser(e.ctx, user("zz", account.RoleViewer)); err != nil {
			return err
		}
		if err := s.AppendAudit(e.ctx, audit.Entry{At: now, Action: audit.Login}.Seal(seq, hash)); err != nil {
			return err
		}
		if n, err := s.PruneAudit(e.ctx, now, 1); err != nil || n != 1 {
			return fmt.Errorf("PruneAudit = %d, %v", n, err)
		}
		return nil
	}
	wrote := make(chan error, 1)
	var during storeState
	err = s.ReadSnapshot(e.ctx, func(m snapshot.Meta) error {
		during.meta = m
		return nil
	}, func(r snapshot.Record) error {
		if during.recs = append(during.recs, r); len(during.recs) == 1 {
			go func() { wrote <- write() }()
			select {
			case err := <-wrote:
				wrote <- err
			case <-time.After(time.Second):
			}
		}
		return nil
	})
	e.must(err, "ReadSnapshot")
	e.must(<-wrote, "the writes during the read")
	wantSameSnapshot(t, "a snapshot read while the store was written", during, sn)
	// A key, a user and a grant's history record more, an audit entry more and
	// one less.
	if after := e.readSnapshot(); len(after.recs) != len(sn.recs)+3 || after.meta.AuditSeq != sn.meta.AuditSeq+1 {
		t.Fatalf("the snapshot after the writes holds %d records, audit head %d; want %d, %d",
			len(after.recs), after.meta.AuditSeq, len(sn.recs)+3, sn.meta.AuditSeq+1)
	}
}

// testSnapshotRestorePlan: a snapshot made safe by a RestorePlan and loaded over
// the store it was taken of, which went on meanwhile: a new generation above both;
// every node floored and quarantined until Until, restorable; leases kept with
// their expiry, their holders served (idempotent Alloc, Renew, a claim of their
// own lease ignored); a grant made after the backup restored by its claim; no new
// grant before Until, and after it a window that starts after Until and a token
// above every token the live store handed out.
func testSnapshotRestorePlan(t *testing.T, open Factory) {
	e := richState(t, open)
	sn := e.readSnapshot()
	// The store goes on after the backup: a grant it will forget, more tokens.
	after := e.alloc(req(9), 1, 10*time.Minute).Leases[0]
	for range 3 {
		e.alloc(req(10), 1, time.Minute)
		e.remove(req(10), e.now())
	}
	live := e.status()
	plan := snapshot.RestorePlan{Now: e.clock.Now(), LeaseDuration: 48 * time.Hour, Grace: 10 * time.Minute,
		LiveFence: live.Fence, LiveGeneration: live.Generation.Number}
	until := plan.Until()
	wantTime(t, "Until", until, e.now().Add(48*time.Hour+10*time.Minute))
	safe := storeState{meta: plan.SafeMeta(sn.meta)}
	for _, r := range sn.recs {
		safe.recs = append(safe.recs, plan.SafeRecord(r))
	}
	g := safe.meta.Generation
	if g.ID == "" || g.ID == sn.meta.Generation.ID || g.ID == live.Generation.ID || g.Origin != idkeeper.OriginRecovered ||
		g.Number != max(sn.meta.Generation.Number, live.Generation.Number)+1 || !g.At.Equal(e.now()) {
		t.Fatalf("SafeMeta generation %+v (snapshot %+v, live %+v)", g, sn.meta.Generation, live.Generation)
	}
	if safe.meta.Fence != live.Fence || live.Fence <= sn.meta.Fence {
		t.Fatalf("SafeMeta fence %d, snapshot %d, live %d", safe.meta.Fence, sn.meta.Fence, live.Fence)
	}

	e.load(safe)
	wantSameSnapshot(t, "the snapshot of the restored store", e.readSnapshot(), safe)
	e.check()
	leases, free := sn.count(isLease), sn.count(isFree)
	c := e.counts()
	if c.Quarantined != free || c.Leased+c.InGrace != leases || c.Remaining != 0 || c.Total != e.nodes {
		t.Fatalf("Counts after the restore = %+v; want %d quarantined, %d held, none remaining", c, free, leases)
	}
	for _, r := range sn.recs {
		if r.Node == nil {
			continue
		}
		st := e.node(r.Node.NodeID)
		if st.Floor.Before(until) || st.QuarantinedUntil.Before(until) || !st.Restorable ||
			!st.Watermark.Equal(r.Node.Watermark) || st.LastToken != r.Node.LastToken {
			t.Fatalf("after the restore %s\nwas %s", fmtNode(st), fmtNode(*r.Node))
		}
		if (st.Lease == nil) != (r.Node.Lease == nil) {
			t.Fatalf("after the restore %s\nwas %s", fmtNode(st), fmtNode(*r.Node))
		}
		if st.Lease != nil {
			wantLease(t, "a kept lease", *st.Lease, *r.Node.Lease)
		}
	}
	e.wantExhausted(req(11), 1, 0)

	// A kept lease's holder is served: its idempotent Alloc returns its leases,
	// a claim of its own lease is no news, its Renew extends it.
	held := e.heldBy(req(1))
	ga, err := e.allocRaw(req(1), 2, 10*time.Minute)
	e.must(err, "idempotent Alloc of a kept lease's holder")
	wantSameLeases(t, "idempotent Alloc after the restore", ga.Leases, held)
	own := []idkeeper.Claim{{NodeID: held[0].NodeID, Token: held[0].FencingToken, NotBefore: held[0].NotBefore, ExpiresAt: held[0].ExpiresAt}}
	gr := e.renewClaims(req(1), 48*time.Hour, 10*time.Minute, own, nil, nil)
	for i, l := range gr.Leases {
		want := held[i]
		want.ExpiresAt, want.RenewedAt = e.now().Add(48*time.Hour), e.now()
		wantLease(t, "a kept lease renewed", l, want)
	}

	// The grant made after the backup comes back with its receipt.
	was := e.node(after.NodeID)
	claim := idkeeper.Claim{NodeID: after.NodeID, Token: after.FencingToken, NotBefore: after.NotBefore, ExpiresAt: after.ExpiresAt}
	gr = e.renewClaims(req(9), 48*time.Hour, 10*time.Minute, []idkeeper.Claim{claim}, []idkeeper.NodeID{after.NodeID}, nil)
	want := idkeeper.Lease{NodeID: after.NodeID, Requester: req(9), KeyID: keyA, FencingToken: after.FencingToken,
		NotBefore: maxTime(after.NotBefore, was.Watermark.Add(ms)), ExpiresAt: e.now().Add(48 * time.Hour),
		GrantedAt: e.now(), RenewedAt: e.now()}
	wantSameLeases(t, "a lease restored by its claim", gr.Leases, []idkeeper.Lease{want})

	// No new grant before Until; after it, a window after Until and a token above
	// the live store's.
	e.clock.Set(until.Add(-ms))
	e.wantExhausted(req(11), 1, 0)
	e.clock.Set(until)
	l := e.alloc(req(11), 1, 10*time.Minute).Leases[0]
	if !l.NotBefore.After(until) || l.FencingToken <= live.Fence {
		t.Fatalf("the first grant after the restore: %s; want NotBefore after %s and a token above %d",
			fmtLease(l), fmtTime(until), live.Fence)
	}
}

// testSnapshotLarge: a snapshot of thousands of records (more than a store's
// batch, which is 1000 at most), with a requester whose leases span batches,
// round trips; a source that fails, or a record found invalid, past the first
// batches changes nothing.
func testSnapshotLarge(t *testing.T, open Factory) {
	e := setup(t, open, 2500)
	s := e.snap()
	g, err := e.allocRaw(req(1), 1500, time.Hour)
	e.must(err, "Alloc(1500)")
	e.fence = g.Fence
	e.must(s.Quarantine(e.ctx, e.guard(), e.now().Add(time.Hour), 2400, 1200), "Quarantine")
	for i := range 1100 {
		e.must(s.CreateAPIKey(e.ctx, newKey(fmt.Sprintf("key-%04d", i), e.now(), "")), "CreateAPIKey")
	}
	for range 1200 {
		appendAudit(t, s, e.now(), audit.LeaseGrant)
	}
	sn := e.readSnapshot()
	if len(sn.recs) != 2500+1100+1200+1500 {
		t.Fatalf("the snapshot holds %d records", len(sn.recs))
	}

	f := otherState(t, open, e.clock.Now())
	before := f.readSnapshot()
	boom := errors.New("the backup file is truncated")
	for _, n := range []int{1500, 3700, len(sn.recs)} {
		err := f.snap().LoadSnapshot(f.ctx, sn.meta, newSource(sn.recs, n, boom))
		if !errors.Is(err, boom) {
			t.Fatalf("LoadSnapshot with a source failing at record %d: %v", n, err)
		}
		wantUntouched(t, fmt.Sprintf("a source failing at record %d", n), f, before)
	}
	bad := sn.clone()
	lastAudit := bad.first(isHistory) - 1
	bad.recs = slices.Delete(bad.recs, lastAudit-1, lastAudit)
	if err := f.snap().LoadSnapshot(f.ctx, bad.meta, newSource(bad.recs, -1, nil)); protocol.ErrorCode(err) != protocol.CodeInvalidRequest {
		t.Fatalf("LoadSnapshot with a gap in the last audit entries: %v, want INVALID_REQUEST", err)
	}
	wantUntouched(t, "a gap in the last audit entries", f, before)

	f.load(sn)
	wantSameSnapshot(t, "the snapshot of the loaded store", f.readSnapshot(), sn)
	wantSameState(t, e, f)
	f.check()
	wantSameGrant(t, "Renew of 1500 leases", e.renew(req(1), time.Hour), f.renew(req(1), time.Hour), false)
}
