package redis_test

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/account"
	"github.com/idkeeper/idkeeper/allowlist"
	"github.com/idkeeper/idkeeper/audit"
	"github.com/idkeeper/idkeeper/internal/harness/redistest"
	"github.com/idkeeper/idkeeper/internal/harness/storetest"
	"github.com/idkeeper/idkeeper/protocol"
	"github.com/idkeeper/idkeeper/redis"
)

func TestAdminContract(t *testing.T) {
	srv := redistest.Start(t)
	storetest.RunAdmin(t, func(t *testing.T, clock idkeeper.Clock) account.Store {
		return open(t, srv, redis.Options{Clock: clock})
	})
}

// The contract holds on Redis Cluster through a cluster client: every script's
// keys, and the MULTI of Session, stay in the slot of the hash tag.
func TestAdminCluster(t *testing.T) {
	srv := redistest.Start(t, redistest.WithCluster())
	c := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: []string{srv.Addr()}})
	t.Cleanup(func() { c.Close() })
	storetest.RunAdmin(t, func(t *testing.T, clock idkeeper.Clock) account.Store {
		return open(t, srv, redis.Options{Clock: clock, Client: c})
	})
}

// Every key the admin records write carries the store's hash tag.
func TestAdminKeysShareOneHashTag(t *testing.T) {
	ctx := t.Context()
	srv := redistest.Start(t)
	s := open(t, srv, redis.Options{Prefix: "admintag"})
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(s.CreateUser(ctx, account.User{Name: "alice", Role: account.RoleAdmin, CreatedAt: t0}))
	must(s.CreateSession(ctx, account.Session{ID: "s1", User: "{evil}", CreatedAt: t0, SeenAt: t0, ExpiresAt: t0.Add(time.Hour)}))
	must(s.AddAllowEntry(ctx, allowlist.Entry{Prefix: netip.MustParsePrefix("10.0.0.0/8"), CreatedAt: t0}))
	must(s.AppendAudit(ctx, audit.Entry{At: t0, Action: "x"}.Seal(0, "")))
	keys, err := rawClient(t, srv).Keys(ctx, "*").Result()
	must(err)
	if len(keys) != 9 {
		t.Errorf("%d keys written, want 9: %q", len(keys), keys)
	}
	for _, k := range keys {
		if !strings.HasPrefix(k, "{admintag}:") || hashTag(k) != "admintag" {
			t.Errorf("key %q does not carry the hash tag {admintag}", k)
		}
	}
}

// A corrupt record is an error, never a panic nor a silent zero value.
func TestAdminCorruptRecords(t *testing.T) {
	ctx := t.Context()
	srv := redistest.Start(t)
	s := open(t, srv, redis.Options{Prefix: "admincorrupt"})
	raw := rawClient(t, srv)
	set := func(key string, fv ...any) {
		t.Helper()
		if err := raw.HSet(ctx, "{admincorrupt}:"+key, fv...).Err(); err != nil {
			t.Fatal(err)
		}
	}
	wantErr := func(what string, err error) {
		t.Helper()
		if err == nil || errors.Is(err, idkeeper.ErrNotFound) {
			t.Errorf("%s: err %v, want a store error", what, err)
		}
	}
	set("users", "bad", "{not json", "noversion", `{"role":"admin"}`, "big", strings.Repeat("x", 70<<10))
	for _, name := range []string{"bad", "noversion", "big"} {
		_, err := s.User(ctx, name)
		wantErr("User "+name, err)
	}
	_, err := s.Users(ctx)
	wantErr("Users", err)

	set("sessions", "s1", `[1,2]`)
	_, err = s.Session(ctx, "s1")
	wantErr("Session with a bad record", err)
	set("sessions", "s2", `{"user":"a"}`) // no seen time
	_, err = s.Session(ctx, "s2")
	wantErr("Session without its seen time", err)

	set("allowlist", "10.1.0.0/8", `{}`)
	_, err = s.AllowEntries(ctx)
	wantErr("AllowEntries with an unmasked prefix", err)

	set("audit-head", "seq", "x", "hash", "h")
	_, _, err = s.AuditHead(ctx)
	wantErr("AuditHead", err)
	set("audit", "1", `{"seq":2,"hash":"h"}`)
	if err := raw.ZAdd(ctx, "{admincorrupt}:audit-seq", goredisZ(1, "1"), goredisZ(2, "2")).Err(); err != nil {
		t.Fatal(err)
	}
	_, err = s.AuditEntries(ctx, 1, 10)
	wantErr("AuditEntries with a record of another Seq", err)
	_, err = s.AuditEntriesBefore(ctx, 0, 10)
	wantErr("AuditEntriesBefore with an indexed entry missing", err)
	_, err = s.PruneAudit(ctx, t0, 10)
	wantErr("PruneAudit over a bad record", err)
}

// Sessions pruned in several batches, with index entries left without a record.
func TestAdminPruneManySessions(t *testing.T) {
	ctx := t.Context()
	srv := redistest.Start(t)
	s := open(t, srv, redis.Options{Prefix: "adminprune"})
	const n = 700
	for i := range n {
		id := fmt.Sprintf("s%04d", i)
		seen := t0
		if i%2 == 1 {
			seen = t0.Add(2 * time.Hour) // lives on
		}
		if err := s.CreateSession(ctx, account.Session{ID: id, User: fmt.Sprint("u", i%3), CreatedAt: t0, SeenAt: seen,
			ExpiresAt: t0.Add(24 * time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
	raw := rawClient(t, srv)
	if err := raw.ZAdd(ctx, "{adminprune}:session-seen", goredisZ(0, "orphan")).Err(); err != nil {
		t.Fatal(err)
	}
	got, err := s.PruneSessions(ctx, t0.Add(time.Hour), time.Hour)
	if err != nil || got != n/2 {
		t.Fatalf("PruneSessions = %d, %v; want %d", got, err, n/2)
	}
	if c, _ := raw.ZCard(ctx, "{adminprune}:session-seen").Result(); c != n/2 {
		t.Errorf("seen index holds %d, want %d", c, n/2)
	}
	left := 0
	for u := range 3 {
		k, err := s.DeleteUserSessions(ctx, fmt.Sprint("u", u))
		if err != nil {
			t.Fatal(err)
		}
		left += k
	}
	if left != n/2 {
		t.Errorf("DeleteUserSessions found %d sessions, want %d", left, n/2)
	}
}

func goredisZ(score float64, member string) goredis.Z { return goredis.Z{Score: score, Member: member} }

// PruneAudit works in batches, and deletes only a run from the oldest entry up:
// an old entry after a newer one stays, so the chain left is unbroken.
func TestAdminPruneAuditBatches(t *testing.T) {
	ctx := t.Context()
	s := open(t, redistest.Start(t), redis.Options{})
	add := func(at time.Time) {
		t.Helper()
		seq, hash, err := s.AuditHead(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.AppendAudit(ctx, audit.Entry{At: at, Action: "x"}.Seal(seq, hash)); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 600 {
		add(t0.Add(time.Duration(i) * time.Millisecond))
	}
	add(t0.Add(time.Hour))
	add(t0) // older than the one before it
	n, err := s.PruneAudit(ctx, t0.Add(550*time.Millisecond), maxPrune)
	if err != nil || n != 550 {
		t.Fatalf("PruneAudit = %d, %v; want 550", n, err)
	}
	n, err = s.PruneAudit(ctx, t0.Add(30*time.Minute), maxPrune)
	if err != nil || n != 50 {
		t.Fatalf("PruneAudit up to the newer entry = %d, %v; want 50", n, err)
	}
	rest, err := s.AuditEntries(ctx, 0, 1000)
	if err != nil || len(rest) != 2 || rest[0].Seq != 601 {
		t.Fatalf("entries left: %d from %+v, %v", len(rest), rest, err)
	}
	seq, hash, err := s.AuditHead(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := audit.Verify(rest, seq, hash); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PruneAudit(ctx, t0, maxPrune+1); protocol.ErrorCode(err) != protocol.CodeInvalidRequest {
		t.Errorf("PruneAudit with limit %d: %v, want INVALID_REQUEST", maxPrune+1, err)
	}
}

const maxPrune = 10000
