package main

import (
	"bytes"
	"context"
	be "encoding/binary"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	bbolt "go.etcd.io/bbolt"

	"github.com/idkeeper/idkeeper/account"
	"github.com/idkeeper/idkeeper/audit"
	"github.com/idkeeper/idkeeper/bolt"
)

// withStdin makes the users command read s as its standard input.
func withStdin(t *testing.T, s string) {
	t.Helper()
	old := stdin
	stdin = strings.NewReader(s)
	t.Cleanup(func() { stdin = old })
}

// Issue #10: idkeeper users on a store: the first admin and more accounts, with
// passwords from a file or standard input (never argv); list; disable, enable,
// set-role, reset-password; each change audited as the store's operator.
func TestUsersOnTheStore(t *testing.T) {
	dir := t.TempDir()
	store := "bolt:" + filepath.Join(dir, "idkeeper.db")
	initInProcess(t, store) // only init makes a bolt store (issue #30)
	ctx := context.Background()
	cli := func(args ...string) (int, string, string) {
		return runInProcess(ctx, append(args, "--store", store), nil)
	}
	pwFile := filepath.Join(dir, "pw")
	if err := os.WriteFile(pwFile, []byte("the first admin's password\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out, stderr := cli("users", "add", "root", "--role", "admin", "--password-file", pwFile); code != exitOK ||
		out != "added user root (role admin)\n" {
		t.Fatalf("add root: %d %q %s", code, out, stderr)
	}
	withStdin(t, "bob's password 123\nignored\n")
	if code, out, stderr := cli("users", "add", "bob", "--role", "viewer"); code != exitOK || !strings.Contains(out, "added user bob (role viewer)") {
		t.Fatalf("add bob: %d %q %s", code, out, stderr)
	}
	for _, c := range []struct {
		args []string
		out  string
	}{
		{[]string{"users", "disable", "bob"}, "user bob: disabled\n"},
		{[]string{"users", "enable", "bob"}, "user bob: enabled\n"},
		{[]string{"users", "set-role", "bob", "operator"}, "user bob: role operator\n"},
	} {
		if code, out, stderr := cli(c.args...); code != exitOK || out != c.out {
			t.Fatalf("%v: %d %q %s", c.args, code, out, stderr)
		}
	}
	withStdin(t, "bob's new password 456")
	if code, out, stderr := cli("users", "reset-password", "bob"); code != exitOK || !strings.Contains(out, "password reset") {
		t.Fatalf("reset-password: %d %q %s", code, out, stderr)
	}
	code, out, _ := cli("users", "list")
	if code != exitOK || !strings.Contains(out, "root  admin     enabled") || !strings.Contains(out, "bob   operator  enabled") ||
		!strings.Contains(out, "operator:") {
		t.Fatalf("list: %d\n%s", code, out)
	}
	code, out, _ = cli("users", "list", "--format", "json")
	var rows []userRow
	if code != exitOK || json.Unmarshal([]byte(out), &rows) != nil || len(rows) != 2 || rows[0].Name != "bob" || rows[0].Role != "operator" {
		t.Fatalf("list json: %d %s", code, out)
	}
	if strings.Contains(out, "argon2") {
		t.Fatalf("list shows a password hash: %s", out)
	}

	// Refused: the last admin; a short password; no password; a missing role or
	// name; an unknown account; a role that is none.
	for _, c := range []struct {
		args  []string
		stdin string
		code  int
		want  string
	}{
		{[]string{"users", "disable", "root"}, "", exitFail, "the last enabled admin"},
		{[]string{"users", "set-role", "root", "viewer"}, "", exitFail, "the last enabled admin"},
		{[]string{"users", "add", "carol", "--role", "viewer"}, "short\n", exitUsage, "12 to 1024 bytes"},
		{[]string{"users", "add", "carol", "--role", "viewer"}, "", exitUsage, "no password"},
		{[]string{"users", "add", "carol", "--role", "viewer"}, "Password1234\n", exitUsage, "most common"},
		{[]string{"users", "reset-password", "bob"}, "qwerty123456\n", exitUsage, "most common"},
		{[]string{"users", "add", "carol"}, "carol's password 1", exitUsage, "--role is required"},
		{[]string{"users", "add", "carol", "--role", "boss"}, "carol's password 1", exitUsage, "the role is one of"},
		{[]string{"users", "add", "--role", "viewer"}, "carol's password 1", exitUsage, "want the user's NAME"},
		{[]string{"users", "add", "Carol!", "--role", "viewer"}, "carol's password 1", exitUsage, "a user name is"},
		{[]string{"users", "enable", "nobody"}, "", exitFail, `no user named "nobody"`},
		{[]string{"users", "set-role", "bob"}, "", exitUsage, "NAME and the ROLE"},
		{[]string{"users", "add", "bob", "--role", "viewer"}, "bob's password 123", exitFail, "exists"},
		{[]string{"users", "frobnicate"}, "", exitUsage, "want the subcommand"},
	} {
		withStdin(t, c.stdin)
		if code, _, stderr := cli(c.args...); code != c.code || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d, %q; want %d and %q", c.args, code, stderr, c.code, c.want)
		}
	}

	st, err := bolt.Open(filepath.Join(dir, "idkeeper.db"), bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	es, err := st.AuditEntries(ctx, 0, 100)
	if err != nil || len(es) != 6 {
		t.Fatalf("audit entries %+v, %v; want 6", es, err)
	}
	for i, want := range []string{audit.UserCreate, audit.UserCreate, audit.UserUpdate,
		audit.UserUpdate, audit.UserUpdate, audit.PasswordChange} {
		if es[i].Action != want || !strings.HasPrefix(es[i].Actor, "operator:") {
			t.Fatalf("entry %d = %+v, want %s by the operator", i+1, es[i], want)
		}
	}
	bob, err := st.User(ctx, "bob")
	if err != nil || bob.Role != account.RoleOperator || bob.Disabled || !strings.HasPrefix(bob.CreatedBy, "operator:") ||
		strings.Contains(bob.PasswordHash, "456") {
		t.Fatalf("bob %+v, %v", bob, err)
	}
}

// tamperAudit changes the stored entry seq of a bolt file with bbolt's own API:
// edit gets the encoded record and returns the new one, or nil to delete it.
func tamperAudit(t *testing.T, path string, seq uint64, edit func([]byte) []byte) {
	t.Helper()
	db, err := bbolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.Update(func(tx *bbolt.Tx) error {
		b := tx.Bucket([]byte("audit"))
		k := be.BigEndian.AppendUint64(nil, seq)
		v := b.Get(k)
		if v == nil {
			t.Fatalf("no audit entry %d in %s", seq, path)
		}
		if nv := edit(bytes.Clone(v)); nv != nil {
			return b.Put(k, nv)
		}
		return b.Delete(k)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// Issue #10: audit verify finds an intact log intact, and reports the first broken
// link of one whose entry was changed, removed, or cut off at the end; audit list
// prints the newest entries.
func TestAuditVerify(t *testing.T) {
	ctx := context.Background()
	page := auditPage
	auditPage = 3 // links across pages are checked too
	t.Cleanup(func() { auditPage = page })
	newLog := func(t *testing.T) (path, store string) {
		path = filepath.Join(t.TempDir(), "idkeeper.db")
		store = "bolt:" + path
		initInProcess(t, store)
		for _, name := range []string{"ann", "ben", "cat", "dan"} {
			withStdin(t, name+"'s password 1234")
			if code, _, stderr := runInProcess(ctx, []string{"users", "add", name, "--role", "admin", "--store", store}, nil); code != exitOK {
				t.Fatalf("add %s: %s", name, stderr)
			}
		}
		return path, store
	}
	verify := func(store string) (int, string, string) {
		return runInProcess(ctx, []string{"audit", "verify", "--store", store}, nil)
	}

	path, store := newLog(t)
	if code, out, stderr := verify(store); code != exitOK || out != "audit log intact: entries 1..4\n" {
		t.Fatalf("verify an intact log: %d %q %s", code, out, stderr)
	}
	code, out, _ := runInProcess(ctx, []string{"audit", "list", "--store", store, "--limit", "2", "--format", "json"}, nil)
	var rows []auditRow
	if code != exitOK || json.Unmarshal([]byte(out), &rows) != nil || len(rows) != 2 || rows[0].Seq != 4 ||
		rows[0].Target != "user:dan" || rows[1].Seq != 3 {
		t.Fatalf("list: %d %s", code, out)
	}
	if code, out, _ := runInProcess(ctx, []string{"audit", "list", "--store", store, "--before", "2"}, nil); code != exitOK ||
		!strings.Contains(out, "user:ann") || strings.Contains(out, "user:ben") {
		t.Fatalf("list --before 2: %d %s", code, out)
	}

	// One byte of entry 2's detail ("role admin" → "role bdmin").
	tamperAudit(t, path, 2, func(v []byte) []byte {
		i := bytes.Index(v, []byte("role admin"))
		if i < 0 {
			t.Fatalf("entry 2 holds no detail \"role admin\": %q", v)
		}
		v[i+5]++
		return v
	})
	if code, _, stderr := verify(store); code != exitFail || !strings.Contains(stderr, "audit log broken at entry 2: its hash does not match its content") {
		t.Fatalf("verify after a changed entry: %d %s", code, stderr)
	}

	// Entry 3 removed.
	path, store = newLog(t)
	tamperAudit(t, path, 3, func([]byte) []byte { return nil })
	if code, _, stderr := verify(store); code != exitFail || !strings.Contains(stderr, "audit log broken at entry 4: it follows entry 2: entries are missing") {
		t.Fatalf("verify after a removed entry: %d %s", code, stderr)
	}

	// The last entry cut off.
	path, store = newLog(t)
	tamperAudit(t, path, 4, func([]byte) []byte { return nil })
	if code, _, stderr := verify(store); code != exitFail || !strings.Contains(stderr, "audit log broken at entry 3") ||
		!strings.Contains(stderr, "head is entry 4") {
		t.Fatalf("verify after a cut-off end: %d %s", code, stderr)
	}

	// An empty log; bad flags.
	empty := "bolt:" + filepath.Join(t.TempDir(), "empty.db")
	initInProcess(t, empty)
	if code, out, _ := verify(empty); code != exitOK || !strings.Contains(out, "audit log empty") {
		t.Fatalf("verify an empty log: %d %s", code, out)
	}
	for _, c := range [][]string{{"audit"}, {"audit", "list", "--limit", "0", "--store", empty}, {"audit", "list", "--limit", "1001", "--store", empty}, {"audit", "list", "--format", "xml", "--store", empty}} {
		if code, _, _ := runInProcess(ctx, c, nil); code != exitUsage {
			t.Errorf("%v: exit %d, want %d", c, code, exitUsage)
		}
	}
}
