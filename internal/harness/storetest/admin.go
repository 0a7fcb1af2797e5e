package storetest

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/account"
	"github.com/idkeeper/idkeeper/allowlist"
	"github.com/idkeeper/idkeeper/audit"
	"github.com/idkeeper/idkeeper/internal/harness/fakeclock"
)

// AdminFactory opens a new, empty account.Store. It registers the store's Close with
// t.Cleanup.
type AdminFactory func(t *testing.T, clock idkeeper.Clock) account.Store

// RunAdmin runs the contract suite of account.Store as subtests of t,
// sentence by sentence of its doc comments.
func RunAdmin(t *testing.T, open AdminFactory) {
	for _, c := range []struct {
		name string
		fn   func(*testing.T, account.Store)
	}{
		{"Users/CreateRead", testUsersCreateRead},
		{"Users/UpdateVersion", testUsersUpdate},
		{"Users/Webhook", testUsersWebhook},
		{"Sessions/CreateRead", testSessionsCreateRead},
		{"Sessions/DeleteAndPrune", testSessionsDelete},
		{"AllowList", testAllowList},
		{"Audit/Chain", testAuditChain},
		{"Audit/Pages", testAuditPages},
		{"Audit/PruneKeepsHead", testAuditPrune},
		{"Audit/ConcurrentAppends", testAuditConcurrent},
	} {
		t.Run(c.name, func(t *testing.T) {
			clock := fakeclock.New(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
			c.fn(t, open(t, clock.Now))
		})
	}
}

var ctx0 = context.Background()

// t0 is the base time of the admin records, to the millisecond.
var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func user(name string, role account.Role) account.User {
	return account.User{Name: name, Role: role, PasswordHash: "$argon2id$v=19$m=65536,t=3,p=2$c2FsdA$aGFzaA",
		CreatedAt: t0, CreatedBy: "root", Epoch: 1, PasswordChangedAt: t0}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func wantErr(t *testing.T, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: err %v, want %v", what, err, want)
	}
}

func wantEqual[T comparable](t *testing.T, what string, got, want T) {
	t.Helper()
	if got != want {
		t.Fatalf("%s:\n got %+v\nwant %+v", what, got, want)
	}
}

func testUsersCreateRead(t *testing.T, s account.Store) {
	if n, err := s.CountUsers(ctx0); err != nil || n != 0 {
		t.Fatalf("CountUsers of an empty store: %d, %v", n, err)
	}
	_, err := s.User(ctx0, "alice")
	wantErr(t, "User of an unknown name", err, idkeeper.ErrNotFound)

	bob, alice := user("bob", account.RoleViewer), user("alice", account.RoleAdmin)
	alice.LastLoginAt = t0.Add(time.Minute)
	must(t, s.CreateUser(ctx0, bob))
	must(t, s.CreateUser(ctx0, alice))
	wantErr(t, "CreateUser of an existing name", s.CreateUser(ctx0, user("bob", account.RoleAdmin)), idkeeper.ErrConflict)

	got, err := s.User(ctx0, "alice")
	must(t, err)
	alice.Version = 1
	wantUser(t, got, alice)
	got, err = s.User(ctx0, "bob")
	must(t, err)
	if got.Role != account.RoleViewer {
		t.Fatalf("CreateUser of an existing name changed the record: role %s", got.Role)
	}
	all, err := s.Users(ctx0)
	must(t, err)
	if len(all) != 2 || all[0].Name != "alice" || all[1].Name != "bob" {
		t.Fatalf("Users: %+v, want alice then bob", all)
	}
	if n, err := s.CountUsers(ctx0); err != nil || n != 2 {
		t.Fatalf("CountUsers: %d, %v; want 2", n, err)
	}
}

func wantUser(t *testing.T, got, want account.User) {
	t.Helper()
	for _, p := range []*time.Time{&got.CreatedAt, &got.PasswordChangedAt, &got.LastLoginAt} {
		if !p.IsZero() && p.Location() != time.UTC {
			t.Errorf("user %s: a time in %s, want UTC", got.Name, p.Location())
		}
	}
	same := got.Name == want.Name && got.Role == want.Role && got.PasswordHash == want.PasswordHash &&
		got.Disabled == want.Disabled && got.CreatedAt.Equal(want.CreatedAt) && got.CreatedBy == want.CreatedBy &&
		got.Epoch == want.Epoch && got.PasswordChangedAt.Equal(want.PasswordChangedAt) &&
		got.LastLoginAt.Equal(want.LastLoginAt) && got.Version == want.Version && got.Webhook == want.Webhook
	if !same {
		t.Fatalf("user:\n got %+v\nwant %+v", got, want)
	}
}

func testUsersUpdate(t *testing.T, s account.Store) {
	u := user("carol", account.RoleOperator)
	wantErr(t, "UpdateUser of an unknown name", s.UpdateUser(ctx0, u), idkeeper.ErrNotFound)
	must(t, s.CreateUser(ctx0, u))
	read, err := s.User(ctx0, "carol")
	must(t, err)

	changed := read
	changed.Disabled, changed.Epoch, changed.Role = true, 2, account.RoleViewer
	must(t, s.UpdateUser(ctx0, changed))
	got, err := s.User(ctx0, "carol")
	must(t, err)
	changed.Version = 2
	wantUser(t, got, changed)

	// An update from a record read before that one is refused and writes nothing.
	stale := read
	stale.PasswordHash = "$argon2id$stale"
	wantErr(t, "UpdateUser from a stale read", s.UpdateUser(ctx0, stale), idkeeper.ErrConflict)
	got, err = s.User(ctx0, "carol")
	must(t, err)
	wantUser(t, got, changed)
}

// testUsersWebhook: a user's webhook URL is kept as given through CreateUser,
// UpdateUser, User and Users, and an update that clears it clears it.
func testUsersWebhook(t *testing.T, s account.Store) {
	const hook = "https://discord.com/api/webhooks/112233445566778899/tok_AbC-dEf_0123456789abcdefghijklmnopqrstuvwxyz"
	dave := user("dave", account.RoleViewer)
	dave.Webhook = hook
	must(t, s.CreateUser(ctx0, dave))
	must(t, s.CreateUser(ctx0, user("erin", account.RoleOperator)))
	got, err := s.User(ctx0, "dave")
	must(t, err)
	dave.Version = 1
	wantUser(t, got, dave)

	erin, err := s.User(ctx0, "erin")
	must(t, err)
	wantEqual(t, "the webhook of a user created without one", erin.Webhook, "")
	erin.Webhook = hook + "2"
	must(t, s.UpdateUser(ctx0, erin))
	erin.Version++
	all, err := s.Users(ctx0)
	must(t, err)
	if len(all) != 2 {
		t.Fatalf("Users: %+v, want dave and erin", all)
	}
	wantUser(t, all[0], dave)
	wantUser(t, all[1], erin)

	// Another update keeps it; one without it clears it.
	erin.LastLoginAt = t0.Add(time.Hour)
	must(t, s.UpdateUser(ctx0, erin))
	erin.Version++
	got, err = s.User(ctx0, "erin")
	must(t, err)
	wantUser(t, got, erin)
	erin.Webhook = ""
	must(t, s.UpdateUser(ctx0, erin))
	erin.Version++
	got, err = s.User(ctx0, "erin")
	must(t, err)
	wantUser(t, got, erin)
	all, err = s.Users(ctx0)
	must(t, err)
	wantEqual(t, "the cleared webhook in Users", all[1].Webhook, "")
	wantEqual(t, "the other user's webhook in Users", all[0].Webhook, hook)
}

func session(id, user string, created time.Time) account.Session {
	return account.Session{ID: id, User: user, Epoch: 1, CreatedAt: created, SeenAt: created,
		ExpiresAt: created.Add(12 * time.Hour), RemoteIP: "192.0.2.7", UserAgent: "Mozilla/5.0 test"}
}

func wantSession(t *testing.T, s account.Store, want account.Session) {
	t.Helper()
	got, err := s.Session(ctx0, want.ID)
	must(t, err)
	if got.ID != want.ID || got.User != want.User || got.Epoch != want.Epoch || !got.CreatedAt.Equal(want.CreatedAt) ||
		!got.SeenAt.Equal(want.SeenAt) || !got.ExpiresAt.Equal(want.ExpiresAt) || got.RemoteIP != want.RemoteIP ||
		got.UserAgent != want.UserAgent {
		t.Fatalf("session:\n got %+v\nwant %+v", got, want)
	}
}

func testSessionsCreateRead(t *testing.T, s account.Store) {
	_, err := s.Session(ctx0, "nope")
	wantErr(t, "Session of an unknown ID", err, idkeeper.ErrNotFound)
	a := session("a1", "alice", t0)
	must(t, s.CreateSession(ctx0, a))
	wantErr(t, "CreateSession of an existing ID", s.CreateSession(ctx0, session("a1", "mallory", t0)), idkeeper.ErrConflict)
	wantSession(t, s, a)

	must(t, s.TouchSession(ctx0, "a1", t0.Add(5*time.Minute)))
	must(t, s.TouchSession(ctx0, "a1", t0.Add(time.Minute))) // never lowers
	a.SeenAt = t0.Add(5 * time.Minute)
	wantSession(t, s, a)
	must(t, s.TouchSession(ctx0, "missing", t0))
	if _, err := s.Session(ctx0, "missing"); !errors.Is(err, idkeeper.ErrNotFound) {
		t.Fatalf("TouchSession of a missing session created one: %v", err)
	}
}

func testSessionsDelete(t *testing.T, s account.Store) {
	for i, id := range []string{"a1", "a2", "b1"} {
		sess := session(id, map[bool]string{true: "alice", false: "bob"}[id[0] == 'a'], t0.Add(time.Duration(i)*time.Hour))
		must(t, s.CreateSession(ctx0, sess))
	}
	must(t, s.DeleteSession(ctx0, "a2"))
	must(t, s.DeleteSession(ctx0, "a2")) // missing: no error
	_, err := s.Session(ctx0, "a2")
	wantErr(t, "Session after DeleteSession", err, idkeeper.ErrNotFound)

	must(t, s.CreateSession(ctx0, session("a3", "alice", t0)))
	n, err := s.DeleteUserSessions(ctx0, "alice")
	must(t, err)
	wantEqual(t, "DeleteUserSessions(alice)", n, 2)
	for _, id := range []string{"a1", "a3"} {
		_, err := s.Session(ctx0, id)
		wantErr(t, "a session of a user whose sessions were deleted", err, idkeeper.ErrNotFound)
	}
	wantSession(t, s, session("b1", "bob", t0.Add(2*time.Hour)))
	if n, err := s.DeleteUserSessions(ctx0, "alice"); err != nil || n != 0 {
		t.Fatalf("DeleteUserSessions again: %d, %v", n, err)
	}

	// Prune: c1 ends by its absolute expiry, c2 by idleness, c3 lives on.
	idle := 30 * time.Minute
	c1 := session("c1", "carol", t0)
	c1.ExpiresAt, c1.SeenAt = t0.Add(time.Hour), t0.Add(50*time.Minute)
	c2 := session("c2", "carol", t0)
	c3 := session("c3", "carol", t0)
	c3.SeenAt = t0.Add(45 * time.Minute)
	for _, c := range []account.Session{c1, c2, c3} {
		must(t, s.CreateSession(ctx0, c))
	}
	n, err = s.PruneSessions(ctx0, t0.Add(time.Hour), idle)
	must(t, err)
	wantEqual(t, "PruneSessions", n, 2) // c1 and c2; b1 was seen at t0+2h
	for _, id := range []string{"c1", "c2"} {
		_, err := s.Session(ctx0, id)
		wantErr(t, "a pruned session", err, idkeeper.ErrNotFound)
	}
	wantSession(t, s, c3)
}

func testAllowList(t *testing.T, s account.Store) {
	entries, err := s.AllowEntries(ctx0)
	must(t, err)
	wantEqual(t, "entries of an empty list", len(entries), 0)
	add := func(p, note string) error {
		return s.AddAllowEntry(ctx0, allowlist.Entry{Prefix: netip.MustParsePrefix(p), Note: note, CreatedBy: "alice", CreatedAt: t0})
	}
	must(t, add("10.1.2.3/8", "office"))
	must(t, add("2001:db8::1/32", "v6 lab"))
	must(t, add("192.0.2.0/24", ""))
	must(t, add("10.0.0.0/16", "narrower"))
	wantErr(t, "AddAllowEntry of a listed prefix, unmasked", add("10.9.9.9/8", "again"), idkeeper.ErrConflict)

	entries, err = s.AllowEntries(ctx0)
	must(t, err)
	var got []string
	for _, e := range entries {
		got = append(got, e.Prefix.String()+" "+e.Note)
	}
	want := []string{"10.0.0.0/8 office", "10.0.0.0/16 narrower", "192.0.2.0/24 ", "2001:db8::/32 v6 lab"}
	wantEqual(t, "AllowEntries", fmt.Sprint(got), fmt.Sprint(want))
	if e := entries[0]; e.CreatedBy != "alice" || !e.CreatedAt.Equal(t0) {
		t.Fatalf("entry: %+v", e)
	}

	must(t, s.RemoveAllowEntry(ctx0, netip.MustParsePrefix("10.200.0.1/8")))
	wantErr(t, "RemoveAllowEntry of an unlisted prefix", s.RemoveAllowEntry(ctx0, netip.MustParsePrefix("10.0.0.0/8")), idkeeper.ErrNotFound)
	entries, err = s.AllowEntries(ctx0)
	must(t, err)
	wantEqual(t, "entries after a removal", len(entries), 3)
}

// appendAudit appends an entry after the head, as the registry does.
func appendAudit(t *testing.T, s account.Store, at time.Time, action string) audit.Entry {
	t.Helper()
	seq, hash, err := s.AuditHead(ctx0)
	must(t, err)
	e := audit.Entry{At: at, Actor: "user:alice", Action: action, Target: "node:7", RemoteIP: "192.0.2.1",
		Detail: "token 12"}.Seal(seq, hash)
	must(t, s.AppendAudit(ctx0, e))
	return e
}

func testAuditChain(t *testing.T, s account.Store) {
	seq, hash, err := s.AuditHead(ctx0)
	must(t, err)
	if seq != 0 || hash != "" {
		t.Fatalf("head of an empty log: %d %q", seq, hash)
	}
	e1 := appendAudit(t, s, t0, audit.Login)
	wantEqual(t, "first entry's Seq", e1.Seq, uint64(1))

	// Entries that do not extend the log are refused and write nothing.
	for name, e := range map[string]audit.Entry{
		"same seq":   audit.Entry{At: t0, Action: "x"}.Seal(0, ""),
		"gap":        audit.Entry{At: t0, Action: "x"}.Seal(2, e1.Hash),
		"wrong prev": audit.Entry{At: t0, Action: "x"}.Seal(1, "00"),
	} {
		wantErr(t, "AppendAudit, "+name, s.AppendAudit(ctx0, e), idkeeper.ErrConflict)
	}
	e2 := appendAudit(t, s, t0.Add(time.Second), audit.LeaseGrant)
	seq, hash, err = s.AuditHead(ctx0)
	must(t, err)
	if seq != 2 || hash != e2.Hash {
		t.Fatalf("head: %d %s, want 2 %s", seq, hash, e2.Hash)
	}
	got, err := s.AuditEntries(ctx0, 1, 10)
	must(t, err)
	if len(got) != 2 || got[0] != e1 || got[1] != e2 {
		t.Fatalf("AuditEntries:\n%+v\nwant %+v %+v", got, e1, e2)
	}
	must(t, audit.Verify(got, seq, hash))
}

func testAuditPages(t *testing.T, s account.Store) {
	var all []audit.Entry
	for i := range 25 {
		all = append(all, appendAudit(t, s, t0.Add(time.Duration(i)*time.Minute), audit.LeaseGrant))
	}
	page, err := s.AuditEntries(ctx0, 11, 10)
	must(t, err)
	if len(page) != 10 || page[0].Seq != 11 || page[9].Seq != 20 {
		t.Fatalf("AuditEntries(11, 10): %d entries from %d", len(page), page[0].Seq)
	}
	page, err = s.AuditEntriesBefore(ctx0, 0, 10)
	must(t, err)
	if len(page) != 10 || page[0] != all[24] || page[9].Seq != 16 {
		t.Fatalf("AuditEntriesBefore(0, 10): %d entries, first %d", len(page), page[0].Seq)
	}
	page, err = s.AuditEntriesBefore(ctx0, 4, 10)
	must(t, err)
	if len(page) != 3 || page[0].Seq != 3 || page[2].Seq != 1 {
		t.Fatalf("AuditEntriesBefore(4, 10): %+v", page)
	}
	page, err = s.AuditEntries(ctx0, 26, 10)
	must(t, err)
	wantEqual(t, "entries past the head", len(page), 0)
	for _, limit := range []int{0, -1, 1001} {
		if _, err := s.AuditEntries(ctx0, 1, limit); err == nil {
			t.Errorf("AuditEntries with limit %d: no error", limit)
		}
		if _, err := s.AuditEntriesBefore(ctx0, 0, limit); err == nil {
			t.Errorf("AuditEntriesBefore with limit %d: no error", limit)
		}
	}
}

func testAuditPrune(t *testing.T, s account.Store) {
	for i := range 5 {
		appendAudit(t, s, t0.Add(time.Duration(i)*time.Hour), audit.LeaseGrant)
	}
	n, err := s.PruneAudit(ctx0, t0.Add(2*time.Hour), 1) // at most one
	must(t, err)
	wantEqual(t, "PruneAudit with limit 1", n, 1)
	n, err = s.PruneAudit(ctx0, t0.Add(2*time.Hour), 100) // entry 2; entry 3 is at 2h, not before
	must(t, err)
	wantEqual(t, "PruneAudit", n, 1)
	rest, err := s.AuditEntries(ctx0, 1, 100)
	must(t, err)
	if len(rest) != 3 || rest[0].Seq != 3 {
		t.Fatalf("entries after pruning: %d from %d", len(rest), rest[0].Seq)
	}
	seq, hash, err := s.AuditHead(ctx0)
	must(t, err)
	must(t, audit.Verify(rest, seq, hash))

	// Prune everything: the head stays, and the chain goes on from it.
	n, err = s.PruneAudit(ctx0, t0.Add(100*time.Hour), 100)
	must(t, err)
	wantEqual(t, "PruneAudit of the rest", n, 3)
	seq2, hash2, err := s.AuditHead(ctx0)
	must(t, err)
	if seq2 != seq || hash2 != hash {
		t.Fatalf("head after pruning every entry: %d %s, want %d %s", seq2, hash2, seq, hash)
	}
	e6 := appendAudit(t, s, t0.Add(101*time.Hour), audit.Logout)
	if e6.Seq != 6 || e6.Prev != hash {
		t.Fatalf("entry after a full prune: seq %d prev %s", e6.Seq, e6.Prev)
	}
	if _, err := s.PruneAudit(ctx0, t0, 0); err == nil {
		t.Error("PruneAudit with limit 0: no error")
	}
}

// testAuditConcurrent: appenders that retry on ErrConflict build one unbroken chain.
func testAuditConcurrent(t *testing.T, s account.Store) {
	const workers, each = 4, 10
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			for i := 0; i < each; {
				seq, hash, err := s.AuditHead(ctx0)
				if err != nil {
					errs <- err
					return
				}
				e := audit.Entry{At: t0, Actor: fmt.Sprintf("worker:%d", w), Action: "x", Detail: fmt.Sprint(i)}.Seal(seq, hash)
				switch err := s.AppendAudit(ctx0, e); {
				case err == nil:
					i++
				case !errors.Is(err, idkeeper.ErrConflict):
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	all, err := s.AuditEntries(ctx0, 1, 1000)
	must(t, err)
	wantEqual(t, "entries", len(all), workers*each)
	seq, hash, err := s.AuditHead(ctx0)
	must(t, err)
	must(t, audit.Verify(all, seq, hash))
}
