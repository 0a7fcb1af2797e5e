package backup

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	bbolt "go.etcd.io/bbolt"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/account"
	"github.com/idkeeper/idkeeper/allowlist"
	"github.com/idkeeper/idkeeper/audit"
	"github.com/idkeeper/idkeeper/bolt"
	"github.com/idkeeper/idkeeper/internal/harness/fakeclock"
	"github.com/idkeeper/idkeeper/internal/harness/redistest"
	"github.com/idkeeper/idkeeper/protocol"
	"github.com/idkeeper/idkeeper/redis"
	"github.com/idkeeper/idkeeper/snapshot"
)

// store is what bolt and redis both are.
type store interface {
	idkeeper.Store
	account.Store
	snapshot.Store
}

var (
	quiet     = slog.New(slog.DiscardHandler)
	prefixSeq atomic.Int64
)

func asStore(t testing.TB, s any) store {
	t.Helper()
	st, ok := s.(store)
	if !ok {
		t.Fatalf("%T is no snapshot.Store", s)
	}
	return st
}

func openBolt(t testing.TB, clk *fakeclock.Clock) store {
	s, _ := openBoltDump(t, clk)
	return s
}

// openBoltDump opens a bolt store in a file of its own and returns it with a
// function that dumps the file's content: every bucket, nested ones too, with its
// sequence and every key and value. Not the file's bytes: a load that fails has
// committed and deleted its staging bucket, which moves pages but changes no
// content. It reads a copy of the file, since the store holds the file's lock.
func openBoltDump(t testing.TB, clk *fakeclock.Clock) (store, func() string) {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "idk.db")
	s, err := bolt.Open(path, bolt.Options{Clock: clk.Now, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return asStore(t, s), func() string {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		cp := filepath.Join(dir, "copy.db")
		if err := os.WriteFile(cp, b, 0o600); err != nil {
			t.Fatal(err)
		}
		db, err := bbolt.Open(cp, 0o600, &bbolt.Options{ReadOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		var out strings.Builder
		var walk func(indent string, b *bbolt.Bucket) error
		walk = func(indent string, b *bbolt.Bucket) error {
			fmt.Fprintf(&out, "%ssequence %d\n", indent, b.Sequence())
			return b.ForEach(func(k, v []byte) error {
				if v == nil {
					fmt.Fprintf(&out, "%s%q:\n", indent, k)
					return walk(indent+"  ", b.Bucket(k))
				}
				fmt.Fprintf(&out, "%s%q = %q\n", indent, k, v)
				return nil
			})
		}
		if err := db.View(func(tx *bbolt.Tx) error {
			return tx.ForEach(func(name []byte, b *bbolt.Bucket) error {
				fmt.Fprintf(&out, "%q:\n", name)
				return walk("  ", b)
			})
		}); err != nil {
			t.Fatal(err)
		}
		return out.String()
	}
}

// openRedisDump opens a store with a prefix of its own on srv (a private
// redis-server of internal/harness/redistest, never the machine's Redis) and returns it
// with a function that dumps every key of that prefix (names, types, DUMP bytes).
func openRedisDump(t testing.TB, srv *redistest.Server, clk *fakeclock.Clock) (store, func() string) {
	t.Helper()
	prefix := fmt.Sprintf("backup%d", prefixSeq.Add(1))
	s, err := redis.Open(srv.URL(), redis.Options{Prefix: prefix, Clock: clk.Now, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	o, err := goredis.ParseURL(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	raw := goredis.NewClient(o)
	t.Cleanup(func() { raw.Close() })
	return asStore(t, s), func() string {
		ctx := context.Background()
		keys, err := raw.Keys(ctx, "{"+prefix+"}*").Result()
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(keys)
		var b strings.Builder
		for _, k := range keys {
			d, err := raw.Dump(ctx, k).Result()
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(&b, "%s %x\n", k, d)
		}
		return b.String()
	}
}

// opener opens a new, empty store of one kind on clk; dump opens one with a
// function that returns its raw content (the file's bytes, the prefix's keys).
type opener struct {
	kind string
	open func(t testing.TB, clk *fakeclock.Clock) store
	dump func(t testing.TB, clk *fakeclock.Clock) (store, func() string)
}

func openers(t *testing.T) []opener {
	srv := redistest.Start(t)
	return []opener{
		{"bolt", openBolt, openBoltDump},
		{"redis", func(t testing.TB, clk *fakeclock.Clock) store { s, _ := openRedisDump(t, srv, clk); return s },
			func(t testing.TB, clk *fakeclock.Clock) (store, func() string) { return openRedisDump(t, srv, clk) }},
	}
}

func who(i int) idkeeper.Requester {
	return idkeeper.Requester{MachineID: "host", PID: i, StartedAt: t0.Add(-time.Hour), Instance: fmt.Sprintf("i%d", i)}
}

// populate initialises s with a pool of 16 and gives it every kind of record:
// leases (renewed), released node IDs with watermarks, quarantined ones, API keys
// (one revoked), users (one with a webhook), allow-list entries, an audit log
// whose first entry was pruned, and an admin session (not part of a snapshot).
func populate(t testing.TB, s store, clk *fakeclock.Clock) {
	t.Helper()
	ctx := context.Background()
	res, err := s.Init(ctx, idkeeper.PoolSpec{Nodes: 16})
	if err != nil {
		t.Fatal(err)
	}
	g := idkeeper.Guard{Generation: res.Generation.ID}
	k1 := idkeeper.APIKeyFor("idk_one-0123456789abcdefghijklmn", "billing", clk.Now(), time.Time{})
	k1.CreatedBy, k1.MaxNodes = idkeeper.CreatedByCLI, 8
	k2 := idkeeper.APIKeyFor("idk_two-0123456789abcdefghijklmn", "old", clk.Now(), clk.Now().Add(24*time.Hour))
	k2.Admin = true
	for _, k := range []idkeeper.APIKey{k1, k2} {
		if err := s.CreateAPIKey(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Alloc(ctx, g, idkeeper.AllocParams{Requester: who(1), KeyID: k1.ID, Count: 3, First: 10 * time.Minute}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Alloc(ctx, g, idkeeper.AllocParams{Requester: who(2), KeyID: k2.ID, Count: 2, First: 10 * time.Minute}); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Minute)
	if _, err := s.Renew(ctx, g, idkeeper.RenewParams{Requester: who(1), KeyID: k1.ID, Duration: 48 * time.Hour, Grace: 10 * time.Minute}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Remove(ctx, g, idkeeper.RemoveParams{Requester: who(2), KeyID: k2.ID, MintedUpTo: clk.Now()}); err != nil {
		t.Fatal(err)
	}
	if err := s.Quarantine(ctx, g, clk.Now().Add(time.Hour), 9, 10); err != nil {
		t.Fatal(err)
	}
	if err := s.RevokeAPIKey(ctx, k2.ID, clk.Now()); err != nil {
		t.Fatal(err)
	}
	for _, u := range []account.User{
		{Name: "ann", Role: account.RoleAdmin, PasswordHash: "$argon2id$v=19$m=65536,t=3,p=4$c2FsdA$aGFzaA", CreatedAt: clk.Now(), Epoch: 1, PasswordChangedAt: clk.Now(),
			Webhook: annWebhook},
		{Name: "bob", Role: account.RoleViewer, PasswordHash: "$argon2id$v=19$m=65536,t=3,p=4$c2FsdA$aGFzaB", CreatedAt: clk.Now(), CreatedBy: "ann", Disabled: true, Epoch: 2},
	} {
		if err := s.CreateUser(ctx, u); err != nil {
			t.Fatal(err)
		}
	}
	for _, e := range []allowlist.Entry{
		{Prefix: netip.MustParsePrefix("10.0.0.0/8"), Note: "office", CreatedBy: "user:ann", CreatedAt: clk.Now()},
		{Prefix: netip.MustParsePrefix("2001:db8::/32"), CreatedAt: clk.Now()},
	} {
		if err := s.AddAllowEntry(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	var seq uint64
	var hash string
	for i, a := range []string{"apikey.create", "lease.grant", "user.login"} {
		e := audit.Entry{At: clk.Now().Add(time.Duration(i) * time.Second), Actor: "user:ann", Action: a, Target: "node:1", Detail: "ü <&>"}.Seal(seq, hash)
		if err := s.AppendAudit(ctx, e); err != nil {
			t.Fatal(err)
		}
		seq, hash = e.Seq, e.Hash
	}
	if n, err := s.PruneAudit(ctx, clk.Now().Add(500*time.Millisecond), 1); err != nil || n != 1 {
		t.Fatalf("prune: %d, %v", n, err)
	}
	if err := s.CreateSession(ctx, account.Session{ID: "sess-1", User: "ann", Epoch: 1, CreatedAt: clk.Now(), SeenAt: clk.Now(),
		ExpiresAt: clk.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
}

// snap is a store's snapshot as text: its meta, then every record, one per line;
// "error: …" when it has none. Two stores with equal snaps hold the same durable
// state.
type snap struct {
	meta snapshot.Meta
	recs []snapshot.Record
	err  error
}

func read(t testing.TB, s snapshot.Store) snap {
	t.Helper()
	var sn snap
	sn.err = s.ReadSnapshot(context.Background(), func(m snapshot.Meta) error { sn.meta = m; return nil },
		func(r snapshot.Record) error { sn.recs = append(sn.recs, r); return nil })
	return sn
}

// records is the records as lines of the file format.
func (sn snap) records(t testing.TB) string {
	t.Helper()
	var b strings.Builder
	for _, r := range sn.recs {
		line, err := encodeRecord(r)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(line)
		b.WriteByte('\n')
	}
	return b.String()
}

func (sn snap) String() string {
	if sn.err != nil {
		return "error: " + sn.err.Error()
	}
	h, _ := encodeHeader(Header{Version: Version, TakenAt: t0, Store: "x", Meta: sn.meta})
	var b strings.Builder
	b.Write(h)
	for _, r := range sn.recs {
		line, _ := encodeRecord(r)
		b.WriteByte('\n')
		b.Write(line)
	}
	return b.String()
}

// safe is sn as an import with plan must leave it.
func (sn snap) safe(plan snapshot.RestorePlan) snap {
	out := snap{meta: sn.meta}
	for _, r := range sn.recs {
		out.recs = append(out.recs, plan.SafeRecord(r))
	}
	return out
}

func export(t testing.TB, s snapshot.Store, kind string, at time.Time) ([]byte, Summary) {
	t.Helper()
	var buf bytes.Buffer
	sum, err := Export(context.Background(), s, &buf, Source{Store: kind, TakenAt: at})
	if err != nil {
		t.Fatal(err)
	}
	return buf.Bytes(), sum
}

// Round trip on both stores and migration both ways: export a store, import the
// file into a store of either kind — a fresh one, or the same one after it moved
// on — and export that: the records are the original ones as the plan makes them
// safe; the generation is new, above both; the fencing counter the higher of the
// two; the audit head kept.
func TestExportImportAcrossStores(t *testing.T) {
	ops := openers(t)
	ctx := context.Background()
	for _, from := range ops {
		for _, to := range ops {
			for _, same := range []bool{false, true} {
				if same && from.kind != to.kind {
					continue
				}
				name := from.kind + " to " + to.kind
				if same {
					name = from.kind + " onto itself after it moved on"
				}
				t.Run(name, func(t *testing.T) {
					clk := fakeclock.New(t0)
					src := from.open(t, clk)
					populate(t, src, clk)
					orig := read(t, src)
					data, esum := export(t, src, from.kind, clk.Now())
					if esum.Counts != (Counts{Nodes: 16, Leases: 3, Keys: 2, Users: 2, Allow: 2, Audit: 2, History: 5}) || esum.Bytes != int64(len(data)) {
						t.Fatalf("export summary %+v", esum)
					}
					dst := src
					if !same {
						dst = to.open(t, clk)
					} else {
						// The store moves on: more grants, a higher fencing counter.
						g := idkeeper.Guard{Generation: orig.meta.Generation.ID}
						if _, err := dst.Alloc(ctx, g, idkeeper.AllocParams{Requester: who(3), KeyID: "k", Count: 4, First: 10 * time.Minute}); err != nil {
							t.Fatal(err)
						}
					}
					live := read(t, dst)
					clk.Advance(time.Hour)
					plan, err := PlanFor(ctx, dst, clk.Now(), 48*time.Hour, 10*time.Minute)
					if err != nil {
						t.Fatal(err)
					}
					if same != (plan.LiveFence > 0) || !plan.Now.Equal(clk.Now()) {
						t.Fatalf("plan %+v on %s", plan, live)
					}
					isum, err := Import(ctx, dst, bytes.NewReader(data), plan)
					if err != nil {
						t.Fatal(err)
					}
					got := read(t, dst)
					if got.err != nil {
						t.Fatal(got.err)
					}
					if want := orig.safe(plan).records(t); got.records(t) != want {
						t.Fatalf("records after import:\n%s\nwant:\n%s", got.records(t), want)
					}
					m, om := got.meta, orig.meta
					wantFence := max(om.Fence, live.meta.Fence)
					if m.Nodes != om.Nodes || m.AuditSeq != om.AuditSeq || m.AuditHash != om.AuditHash || m.Fence != wantFence ||
						m.Generation.ID == om.Generation.ID || m.Generation.ID == live.meta.Generation.ID ||
						m.Generation.Number != max(om.Generation.Number, live.meta.Generation.Number)+1 ||
						m.Generation.Origin != idkeeper.OriginRecovered || !m.Generation.At.Equal(plan.Now) {
						t.Fatalf("meta after import %+v; backup %+v, live %+v", m, om, live.meta)
					}
					if isum.Generation != m.Generation || isum.Fence != wantFence || !isum.Until.Equal(clk.Now().Add(48*time.Hour+10*time.Minute)) ||
						isum.Kept.String() != "0-2" || isum.Quarantined.String() != "3-15" || isum.Live != 3 || isum.SHA256 != esum.SHA256 {
						t.Fatalf("import summary %+v", isum)
					}
					if _, err := dst.Session(ctx, "sess-1"); !errors.Is(err, idkeeper.ErrNotFound) {
						t.Fatalf("an admin session survived the import: %v", err)
					}
					// Export again: the same records, whatever the store.
					again, _ := export(t, dst, to.kind, clk.Now())
					_, recs, _, err := readAll(again)
					if err != nil {
						t.Fatal(err)
					}
					if (snap{recs: recs}).records(t) != got.records(t) {
						t.Fatal("the second export differs from the store")
					}
				})
			}
		}
	}
}

// A file import must refuse leaves the store as it was, on both stores — its
// snapshot and its raw content (every bucket, key and value of the bolt file,
// every Redis key of its prefix) — an initialised one with leases and sessions, and an empty one.
func TestImportRefusesAndWritesNothing(t *testing.T) {
	meta, recs := sample()
	data := write(t, meta, recs)
	cases := refusals(t, data)
	ctx := context.Background()
	for _, op := range openers(t) {
		for _, empty := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s empty=%v", op.kind, empty), func(t *testing.T) {
				clk := fakeclock.New(t0)
				s, dump := op.dump(t, clk)
				if !empty {
					populate(t, s, clk)
				}
				before, raw := read(t, s).String(), dump()
				if !empty && len(raw) < 1000 {
					t.Fatalf("the raw content of a populated store: %q", raw)
				}
				plan, err := PlanFor(ctx, s, clk.Now(), 48*time.Hour, 10*time.Minute)
				if err != nil {
					t.Fatal(err)
				}
				for _, c := range cases {
					_, err := Import(ctx, s, bytes.NewReader(c.data), plan)
					if !errors.Is(err, c.kind) || !strings.Contains(err.Error(), c.msg) {
						t.Errorf("%s: %v; want %v saying %q", c.name, err, c.kind, c.msg)
					}
					if after := read(t, s).String(); after != before {
						t.Fatalf("%s: the store changed:\n%s\nwas:\n%s", c.name, after, before)
					}
					if dump() != raw {
						t.Fatalf("%s: the store's raw content changed", c.name)
					}
				}
				if !empty {
					if _, err := s.Session(ctx, "sess-1"); err != nil {
						t.Fatalf("a refused import ended the admin sessions: %v", err)
					}
				}
				// A cancelled import writes nothing either.
				cctx, cancel := context.WithCancel(ctx)
				cancel()
				if _, err := Import(cctx, s, bytes.NewReader(data), plan); !errors.Is(err, context.Canceled) {
					t.Errorf("cancelled: %v", err)
				}
				if after := read(t, s).String(); after != before || dump() != raw {
					t.Fatal("a cancelled import changed the store")
				}
				// The control: the intact file imports.
				if _, err := Import(ctx, s, bytes.NewReader(data), plan); err != nil {
					t.Fatal(err)
				}
				if got := read(t, s); got.records(t) != (snap{recs: recs}).safe(plan).records(t) {
					t.Fatalf("imported:\n%s", got.records(t))
				}
			})
		}
	}
}

func TestPlanFor(t *testing.T) {
	ctx := context.Background()
	clk := fakeclock.New(t0)
	s := openBolt(t, clk)
	p, err := PlanFor(ctx, s, t0.Add(-time.Hour), 48*time.Hour, 10*time.Minute)
	if err != nil || p.LiveFence != 0 || p.LiveGeneration != 0 || !p.Now.Equal(t0) {
		t.Fatalf("on an empty store: %+v, %v (now: the later of the two clocks)", p, err)
	}
	populate(t, s, clk)
	st, _ := s.Status(ctx)
	p, err = PlanFor(ctx, s, t0.Add(time.Hour), 48*time.Hour, 10*time.Minute)
	if err != nil || p.LiveFence != st.Fence || p.LiveGeneration != 1 || !p.Now.Equal(t0.Add(time.Hour)) ||
		!p.Until().Equal(t0.Add(time.Hour+48*time.Hour+10*time.Minute)) {
		t.Fatalf("on an initialised store: %+v, %v", p, err)
	}
	for _, d := range [][2]time.Duration{{0, 0}, {30 * time.Second, 0}, {48 * time.Hour, -1}, {48 * time.Hour, 2 * time.Hour}} {
		if _, err := PlanFor(ctx, s, t0, d[0], d[1]); err == nil {
			t.Errorf("lease %v, grace %v: accepted", d[0], d[1])
		}
	}
	if _, err := Import(ctx, s, strings.NewReader(""), snapshot.RestorePlan{}); err == nil {
		t.Error("an import without a plan ran")
	}
	// Export of a store that holds nothing: STORE_NOT_INITIALISED, and no trailer.
	var buf bytes.Buffer
	if _, err := Export(ctx, openBolt(t, clk), &buf, Source{Store: "bolt"}); protocol.ErrorCode(err) != protocol.CodeStoreNotInitialised ||
		bytes.Contains(buf.Bytes(), []byte(`"end"`)) {
		t.Fatalf("export of an empty store: %v, %q", err, buf.Bytes())
	}
	meta, recs := sample()
	if _, err := Verify(io.LimitReader(bytes.NewReader(write(t, meta, recs)), 100)); !errors.Is(err, ErrTruncated) {
		t.Fatalf("verify of a cut file: %v", err)
	}
}

// TestImportKeepsThePool: a backup carries its pool's First and layout; an import
// into an empty store of either kind writes that pool; an import into a store of
// another node range or layout is refused (POOL_MISMATCH as an INVALID_REQUEST)
// and writes nothing.
func TestImportKeepsThePool(t *testing.T) {
	ops := openers(t)
	ctx := context.Background()
	layout := idkeeper.Layout{Epoch: idkeeper.DefaultLayout.Epoch, TimestampBits: 41, NodeBits: 10, SequenceBits: 12}
	pool := idkeeper.PoolSpec{First: 100, Nodes: 4, Layout: layout}
	for _, from := range ops {
		for _, to := range ops {
			t.Run(from.kind+" to "+to.kind, func(t *testing.T) {
				clk := fakeclock.New(t0)
				src := from.open(t, clk)
				res, err := src.Init(ctx, pool)
				if err != nil {
					t.Fatal(err)
				}
				g := idkeeper.Guard{Generation: res.Generation.ID}
				if _, err := src.Alloc(ctx, g, idkeeper.AllocParams{Requester: who(1), KeyID: "k", Count: 2, First: time.Hour}); err != nil {
					t.Fatal(err)
				}
				data, _ := export(t, src, from.kind, clk.Now())
				if !bytes.Contains(data, []byte(`"first":100,"layout":"41/10/12@2026-01-01T00:00:00.000Z"`)) {
					t.Fatalf("the header lacks the pool: %s", lines(data)[0])
				}

				dst := to.open(t, clk)
				plan, err := PlanFor(ctx, dst, clk.Now(), 48*time.Hour, 10*time.Minute)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := Import(ctx, dst, bytes.NewReader(data), plan); err != nil {
					t.Fatal(err)
				}
				st, err := dst.Status(ctx)
				if err != nil || st.Pool.String() != pool.String() {
					t.Fatalf("pool after the import: %s, %v; want %s", st.Pool, err, pool)
				}

				other := to.open(t, clk)
				if _, err := other.Init(ctx, idkeeper.PoolSpec{Nodes: 4}); err != nil {
					t.Fatal(err)
				}
				before := read(t, other).String()
				plan, err = PlanFor(ctx, other, clk.Now(), 48*time.Hour, 10*time.Minute)
				if err != nil {
					t.Fatal(err)
				}
				_, err = Import(ctx, other, bytes.NewReader(data), plan)
				var e *idkeeper.Error
				if !errors.As(err, &e) || e.Code != protocol.CodeInvalidRequest || !strings.Contains(e.Message, "re-initialise deliberately") {
					t.Fatalf("import into another pool: %v, want the pool mismatch", err)
				}
				if after := read(t, other).String(); after != before {
					t.Fatalf("a refused import changed the store:\n%s\nwas:\n%s", after, before)
				}
			})
		}
	}
}
