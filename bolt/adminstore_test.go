package bolt_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bbolt "go.etcd.io/bbolt"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/account"
	"github.com/idkeeper/idkeeper/allowlist"
	"github.com/idkeeper/idkeeper/audit"
	"github.com/idkeeper/idkeeper/internal/harness/storetest"
)

func TestAdminStore(t *testing.T) {
	storetest.RunAdmin(t, func(t *testing.T, clock idkeeper.Clock) account.Store {
		return open(t, filepath.Join(t.TempDir(), "idkeeper.db"), clock)
	})
}

// A file written before the admin records existed holds none: every read answers
// empty or ErrNotFound without creating anything, and the first writes create
// their buckets.
func TestAdminStoreOnOlderFile(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "idkeeper.db")
	s := open(t, path, nil)
	if _, err := s.Init(ctx, idkeeper.PoolSpec{Nodes: 4}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	db, err := bbolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.View(func(tx *bbolt.Tx) error {
		for _, name := range []string{"users", "sessions", "usersessions", "allowlist", "audit"} {
			if tx.Bucket([]byte(name)) != nil {
				return fmt.Errorf("a new file has bucket %s before any admin write", name)
			}
		}
		return nil
	})
	db.Close()
	if err != nil {
		t.Fatal(err)
	}

	s = open(t, path, nil)
	if _, err := s.User(ctx, "alice"); !errors.Is(err, idkeeper.ErrNotFound) {
		t.Fatalf("User: %v", err)
	}
	if _, err := s.Session(ctx, "s"); !errors.Is(err, idkeeper.ErrNotFound) {
		t.Fatalf("Session: %v", err)
	}
	users, err1 := s.Users(ctx)
	n, err2 := s.CountUsers(ctx)
	allow, err3 := s.AllowEntries(ctx)
	audit, err4 := s.AuditEntriesBefore(ctx, 0, 10)
	seq, hash, err5 := s.AuditHead(ctx)
	if err := errors.Join(err1, err2, err3, err4, err5); err != nil || len(users)+n+len(allow)+len(audit) != 0 || seq != 0 || hash != "" {
		t.Fatalf("reads of an older file: %v %d %v %v %d %q: %v", users, n, allow, audit, seq, hash, err)
	}
	if users == nil || allow == nil || audit == nil {
		t.Fatal("an empty list is nil, want empty")
	}
	for what, err := range map[string]error{
		"TouchSession":     s.TouchSession(ctx, "s", time.Now()),
		"DeleteSession":    s.DeleteSession(ctx, "s"),
		"RemoveAllowEntry": wantIs(s.RemoveAllowEntry(ctx, netip.MustParsePrefix("10.0.0.0/8")), idkeeper.ErrNotFound),
		"UpdateUser":       wantIs(s.UpdateUser(ctx, account.User{Name: "alice"}), idkeeper.ErrNotFound),
	} {
		if err != nil {
			t.Errorf("%s on an older file: %v", what, err)
		}
	}
	if n, err := s.DeleteUserSessions(ctx, "alice"); err != nil || n != 0 {
		t.Errorf("DeleteUserSessions on an older file: %d, %v", n, err)
	}
	if n, err := s.PruneSessions(ctx, time.Now(), time.Hour); err != nil || n != 0 {
		t.Errorf("PruneSessions on an older file: %d, %v", n, err)
	}
	if n, err := s.PruneAudit(ctx, time.Now(), 10); err != nil || n != 0 {
		t.Errorf("PruneAudit on an older file: %d, %v", n, err)
	}
	if err := s.CreateUser(ctx, account.User{Name: "alice", Role: account.RoleAdmin}); err != nil {
		t.Fatal(err)
	}
	if n, err := s.CountUsers(ctx); err != nil || n != 1 {
		t.Fatalf("CountUsers after CreateUser: %d, %v", n, err)
	}
}

func wantIs(err, target error) error {
	if errors.Is(err, target) {
		return nil
	}
	return fmt.Errorf("err %v, want %v", err, target)
}

// The audit head, kept after every entry is pruned, survives a reopen; so do
// accounts, sessions and the allow-list.
func TestAdminRecordsSurviveReopen(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "idkeeper.db")
	at := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	s := open(t, path, nil)
	e1 := audit.Entry{At: at, Action: audit.Login}.Seal(0, "")
	e2 := audit.Entry{At: at, Action: audit.Logout}.Seal(e1.Seq, e1.Hash)
	for _, err := range []error{
		s.AppendAudit(ctx, e1), s.AppendAudit(ctx, e2),
		s.CreateUser(ctx, account.User{Name: "alice", Role: account.RoleAdmin, CreatedAt: at}),
		s.CreateSession(ctx, account.Session{ID: "s1", User: "alice", CreatedAt: at, SeenAt: at, ExpiresAt: at.Add(time.Hour)}),
		s.AddAllowEntry(ctx, allowlist.Entry{Prefix: netip.MustParsePrefix("2001:db8::/32"), CreatedAt: at}),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	if n, err := s.PruneAudit(ctx, at.Add(time.Second), 10); err != nil || n != 2 {
		t.Fatalf("PruneAudit: %d, %v", n, err)
	}
	s.Close()

	s = open(t, path, nil)
	if seq, hash, err := s.AuditHead(ctx); err != nil || seq != 2 || hash != e2.Hash {
		t.Fatalf("AuditHead after reopening: %d %s %v; want 2 %s", seq, hash, err, e2.Hash)
	}
	if u, err := s.User(ctx, "alice"); err != nil || u.Version != 1 || !u.CreatedAt.Equal(at) {
		t.Fatalf("User after reopening: %+v, %v", u, err)
	}
	if n, err := s.DeleteUserSessions(ctx, "alice"); err != nil || n != 1 {
		t.Fatalf("DeleteUserSessions after reopening: %d, %v", n, err)
	}
	if err := s.RemoveAllowEntry(ctx, netip.MustParsePrefix("2001:db8:1::/32")); err != nil {
		t.Fatalf("RemoveAllowEntry after reopening: %v", err)
	}
}

// A corrupt record is a store error, not a panic and not ErrNotFound.
func TestCorruptAdminRecord(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "idkeeper.db")
	s := open(t, path, nil)
	if err := s.CreateUser(ctx, account.User{Name: "alice", Role: account.RoleAdmin}); err != nil {
		t.Fatal(err)
	}
	if err := s.AppendAudit(ctx, audit.Entry{Action: "x"}.Seal(0, "")); err != nil {
		t.Fatal(err)
	}
	s.Close()
	db, err := bbolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bbolt.Tx) error {
		if err := tx.Bucket([]byte("users")).Put([]byte("alice"), []byte{1, 200}); err != nil {
			return err
		}
		return tx.Bucket([]byte("audit")).Put(binary.BigEndian.AppendUint64(nil, 1), []byte{1, 0, 0})
	})
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
	s = open(t, path, nil)
	_, err1 := s.User(ctx, "alice")
	_, err2 := s.Users(ctx)
	err3 := s.UpdateUser(ctx, account.User{Name: "alice", Version: 1})
	_, err4 := s.AuditEntries(ctx, 1, 10)
	_, err5 := s.PruneAudit(ctx, time.Now(), 10)
	for i, err := range []error{err1, err2, err3, err4, err5} {
		if err == nil || errors.Is(err, idkeeper.ErrNotFound) || !strings.Contains(err.Error(), "corrupt") {
			t.Errorf("read %d of a corrupt record: %v", i+1, err)
		}
	}
}
