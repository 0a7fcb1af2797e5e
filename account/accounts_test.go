package account_test

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/account"
	"github.com/idkeeper/idkeeper/audit"
	"github.com/idkeeper/idkeeper/bolt"
	"github.com/idkeeper/idkeeper/internal/harness/fakeclock"
	"github.com/idkeeper/idkeeper/password"
	"github.com/idkeeper/idkeeper/protocol"
)

// cheapParams make a hash take microseconds: tests only.
var cheapParams = password.Params{Memory: 64, Time: 1, Threads: 1, SaltLen: 16, KeyLen: 32}

// countingHasher is a password.Hasher that counts its Verify calls.
type countingHasher struct {
	password.Hasher
	verifies atomic.Int64
}

func (h *countingHasher) Verify(hash, pw string) (bool, error) {
	h.verifies.Add(1)
	return h.Hasher.Verify(hash, pw)
}

type acctEnv struct {
	acc    *account.Service
	store  *bolt.Store
	clk    *fakeclock.Clock
	hasher *countingHasher
	root   account.User // the first admin, "root"
	slept  *sleeper
}

// sleeper is Config.Sleep for tests: it records each delay and advances
// the fake clock by it instead of waiting.
type sleeper struct {
	clk   *fakeclock.Clock
	mu    sync.Mutex
	waits []time.Duration
}

func (s *sleeper) Sleep(ctx context.Context, d time.Duration) error {
	s.mu.Lock()
	s.waits = append(s.waits, d)
	s.mu.Unlock()
	if d > 0 {
		s.clk.Advance(d)
	}
	return ctx.Err()
}

// total is the sum of the delays and how many were above zero.
func (s *sleeper) total() (sum time.Duration, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, d := range s.waits {
		sum += d
		if d > 0 {
			n++
		}
	}
	return sum, n
}

const (
	rootPW = "root password 123"
	bobPW  = "bob's password 1"
)

var (
	actx  = context.Background()
	quiet = slog.New(slog.DiscardHandler)
)

// newAcctEnv opens a Service over a real bbolt file with a fake clock and the first
// admin "root".
func newAcctEnv(t *testing.T) *acctEnv {
	t.Helper()
	clk := fakeclock.New(t0)
	st, err := bolt.Open(filepath.Join(t.TempDir(), "idk.db"), bolt.Options{Clock: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	h := &countingHasher{Hasher: password.Hasher{Params: cheapParams}}
	sl := &sleeper{clk: clk}
	acc, err := account.New(st, h, account.Config{Clock: clk.Now, Logger: quiet, Sleep: sl.Sleep})
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := acc.EnsureFirstAdmin(actx, "root", rootPW); !ok || err != nil {
		t.Fatalf("EnsureFirstAdmin: %v, %v", ok, err)
	}
	root, err := st.User(actx, "root")
	if err != nil {
		t.Fatal(err)
	}
	return &acctEnv{acc: acc, store: st, clk: clk, hasher: h, root: root, slept: sl}
}

// addUser has root create name with role and bobPW.
func (e *acctEnv) addUser(t *testing.T, name string, role account.Role) account.User {
	t.Helper()
	u, err := e.acc.CreateUser(actx, e.root, name, role, bobPW)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func (e *acctEnv) login(t *testing.T, name, pw, ip string) string {
	t.Helper()
	tok, _, err := e.acc.Login(actx, name, pw, ip, "test-agent")
	if err != nil {
		t.Fatalf("Login %s from %s: %v", name, ip, err)
	}
	return tok
}

func (e *acctEnv) wantSession(t *testing.T, tok string, valid bool) {
	t.Helper()
	_, _, err := e.acc.Authenticate(actx, tok)
	switch {
	case valid && err != nil:
		t.Fatalf("Authenticate: %v, want a valid session", err)
	case !valid:
		wantCode(t, err, protocol.CodeSessionExpired)
		if _, err := e.store.Session(actx, account.SessionID(tok)); !errors.Is(err, idkeeper.ErrNotFound) {
			t.Fatalf("an ended session is still stored: %v", err)
		}
	}
}

// auditLog returns every entry after checking the chain against the head.
func (e *acctEnv) auditLog(t *testing.T) []audit.Entry {
	t.Helper()
	all, err := e.store.AuditEntries(actx, 1, 1000)
	if err != nil {
		t.Fatal(err)
	}
	seq, hash, err := e.store.AuditHead(actx)
	if err != nil {
		t.Fatal(err)
	}
	if err := audit.Verify(all, seq, hash); err != nil {
		t.Fatalf("audit chain: %v", err)
	}
	return all
}

func TestEnsureFirstAdmin(t *testing.T) {
	e := newAcctEnv(t)
	if e.root.Role != account.RoleAdmin || e.root.CreatedBy != "" || e.root.Epoch != 1 ||
		!strings.HasPrefix(e.root.PasswordHash, "$argon2id$v=19$m=64,t=1,p=1$") {
		t.Fatalf("first admin: %+v", e.root)
	}
	// With an account there it does nothing, whatever the name and password.
	for _, c := range [][2]string{{"root", "another password"}, {"other", "short"}} {
		if ok, err := e.acc.EnsureFirstAdmin(actx, c[0], c[1]); ok || err != nil {
			t.Fatalf("EnsureFirstAdmin again: %v, %v", ok, err)
		}
	}
	if n, _ := e.store.CountUsers(actx); n != 1 {
		t.Fatalf("%d users", n)
	}
	e.login(t, "root", rootPW, "192.0.2.1")

	// On an empty store it checks name and password first.
	st, err := bolt.Open(filepath.Join(t.TempDir(), "empty.db"), bolt.Options{Clock: e.clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	acc, _ := account.New(st, password.Hasher{Params: cheapParams}, account.Config{Clock: e.clk.Now, Logger: quiet})
	_, err = acc.EnsureFirstAdmin(actx, "admin", "short")
	wantCode(t, err, protocol.CodeInvalidRequest)
	_, err = acc.EnsureFirstAdmin(actx, "Admin!", rootPW)
	wantCode(t, err, protocol.CodeInvalidRequest)
}

func TestLogin_OneGenericError(t *testing.T) {
	e := newAcctEnv(t)
	bob := e.addUser(t, "bob", account.RoleViewer)
	e.addUser(t, "carol", account.RoleViewer)
	if _, err := e.acc.SetDisabled(actx, e.root, "carol", true); err != nil {
		t.Fatal(err)
	}
	var msgs []string
	before := e.hasher.verifies.Load()
	for i, c := range []struct{ name, pw string }{
		{"nobody", bobPW},        // unknown
		{"bob", "letmein-wrong"}, // wrong
		{"carol", bobPW},         // disabled, right password
		{"Bob\x00\n", bobPW},     // not a user name at all
	} {
		_, _, err := e.acc.Login(actx, c.name, c.pw, "198.51.100."+string(rune('1'+i)), "ua")
		wantCode(t, err, protocol.CodeLoginFailed)
		var de *idkeeper.Error
		errors.As(err, &de)
		if de.Details != nil {
			t.Fatalf("%s: details %v", c.name, de.Details)
		}
		msgs = append(msgs, protocol.ErrorMessage(err))
	}
	for _, m := range msgs[1:] {
		if m != msgs[0] {
			t.Fatalf("messages differ: %q", msgs)
		}
	}
	if n := e.hasher.verifies.Load() - before; n != 4 {
		t.Fatalf("%d password checks for 4 failed logins; unknown names must cost one too", n)
	}

	e.clk.Advance(time.Minute)
	tok, s, err := e.acc.Login(actx, "bob", bobPW, "198.51.100.9", "Mozilla/5.0")
	if err != nil {
		t.Fatal(err)
	}
	now := e.clk.Now()
	if len(tok) != 43 || s.ID != account.SessionID(tok) || s.User != "bob" || s.Epoch != bob.Epoch ||
		!s.ExpiresAt.Equal(now.Add(account.DefaultAbsoluteTimeout)) || !s.SeenAt.Equal(now) ||
		s.RemoteIP != "198.51.100.9" || s.UserAgent != "Mozilla/5.0" {
		t.Fatalf("session %+v of token %q", s, tok)
	}
	u, got, err := e.acc.Authenticate(actx, tok)
	if err != nil || u.Name != "bob" || got.ID != s.ID {
		t.Fatalf("Authenticate: %+v %+v %v", u, got, err)
	}
	if u.LastLoginAt.IsZero() || !u.LastLoginAt.Equal(now) {
		t.Fatalf("LastLoginAt %v, want %v", u.LastLoginAt, now)
	}
	for _, bad := range []string{"", "x", tok[:42], tok + "A", strings.ToUpper(tok)} {
		if bad == tok {
			continue
		}
		_, _, err := e.acc.Authenticate(actx, bad)
		wantCode(t, err, protocol.CodeSessionExpired)
	}

	log := e.auditLog(t)
	var failed, ok int
	for _, a := range log {
		if all := a.Actor + a.Target + a.Detail; strings.Contains(all, bobPW) || strings.Contains(all, "letmein") {
			t.Fatalf("audit entry with a password: %+v", a)
		}
		switch a.Action {
		case audit.LoginFailed:
			failed++
			if a.RemoteIP == "" || !strings.HasPrefix(a.Actor, "user:") || strings.ContainsAny(a.Actor, "\x00\n") {
				t.Fatalf("failed login entry %+v", a)
			}
		case audit.Login:
			ok++
			if a.Actor != "user:bob" || a.RemoteIP != "198.51.100.9" {
				t.Fatalf("login entry %+v", a)
			}
		}
	}
	if failed != 4 || ok != 1 {
		t.Fatalf("audit: %d failed, %d logins; want 4, 1", failed, ok)
	}
}

func TestSessionTimeouts(t *testing.T) {
	e := newAcctEnv(t)
	idle := account.DefaultIdleTimeout

	// Idle: each use within the idle timeout keeps it; one gap of it ends it.
	tok := e.login(t, "root", rootPW, "192.0.2.1")
	for range 3 {
		e.clk.Advance(idle - time.Minute)
		e.wantSession(t, tok, true)
	}
	s, _ := e.store.Session(actx, account.SessionID(tok))
	if !s.SeenAt.Equal(e.clk.Now()) {
		t.Fatalf("SeenAt %v, want %v", s.SeenAt, e.clk.Now())
	}
	// Touched at most once a minute.
	e.clk.Advance(30 * time.Second)
	e.wantSession(t, tok, true)
	if s2, _ := e.store.Session(actx, s.ID); !s2.SeenAt.Equal(s.SeenAt) {
		t.Fatalf("touched within a minute: %v → %v", s.SeenAt, s2.SeenAt)
	}
	e.clk.Advance(idle - 30*time.Second)
	e.wantSession(t, tok, false)

	// Absolute: busy all along, it ends AbsoluteTimeout after the login.
	tok = e.login(t, "root", rootPW, "192.0.2.1")
	start := e.clk.Now()
	for e.clk.Now().Before(start.Add(account.DefaultAbsoluteTimeout - 20*time.Minute)) {
		e.clk.Advance(20 * time.Minute)
		e.wantSession(t, tok, true)
	}
	e.clk.Set(start.Add(account.DefaultAbsoluteTimeout))
	e.wantSession(t, tok, false)

	// PruneSessions drops idle ones nobody uses again.
	tok = e.login(t, "root", rootPW, "192.0.2.1")
	tok2 := e.login(t, "root", rootPW, "192.0.2.1")
	e.clk.Advance(idle - time.Minute)
	e.wantSession(t, tok2, true)
	e.clk.Advance(time.Minute)
	if n, err := e.acc.PruneSessions(actx); n != 1 || err != nil {
		t.Fatalf("PruneSessions: %d, %v", n, err)
	}
	if _, err := e.store.Session(actx, account.SessionID(tok)); !errors.Is(err, idkeeper.ErrNotFound) {
		t.Fatalf("pruned session: %v", err)
	}
	e.wantSession(t, tok2, true)
}

func TestSessionRotationAndLogout(t *testing.T) {
	e := newAcctEnv(t)
	a, b := e.login(t, "root", rootPW, "192.0.2.1"), e.login(t, "root", rootPW, "192.0.2.1")
	if a == b || account.SessionID(a) == account.SessionID(b) {
		t.Fatal("two logins share a token")
	}
	e.wantSession(t, a, true)
	e.wantSession(t, b, true)
	if err := e.acc.Logout(actx, a); err != nil {
		t.Fatal(err)
	}
	e.wantSession(t, a, false)
	e.wantSession(t, b, true)
	if err := e.acc.Logout(actx, a); err != nil {
		t.Fatalf("Logout of an ended session: %v", err)
	}
	var logouts int
	for _, x := range e.auditLog(t) {
		if x.Action == audit.Logout && x.Actor == "user:root" {
			logouts++
		}
	}
	if logouts != 1 {
		t.Fatalf("%d logouts audited", logouts)
	}
}

func TestSessionsEndOnDisableAndPasswordChange(t *testing.T) {
	e := newAcctEnv(t)
	e.addUser(t, "bob", account.RoleOperator)
	tok := e.login(t, "bob", bobPW, "192.0.2.2")
	if _, err := e.acc.SetDisabled(actx, e.root, "bob", true); err != nil {
		t.Fatal(err)
	}
	e.wantSession(t, tok, false)
	_, _, err := e.acc.Login(actx, "bob", bobPW, "192.0.2.2", "")
	wantCode(t, err, protocol.CodeLoginFailed)
	if _, err := e.acc.SetDisabled(actx, e.root, "bob", false); err != nil {
		t.Fatal(err)
	}

	tok = e.login(t, "bob", bobPW, "192.0.2.2")
	other := e.login(t, "bob", bobPW, "192.0.2.3")
	bob, _, err := e.acc.Authenticate(actx, tok)
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.acc.ChangePassword(actx, bob, "not the password", "a new password 2")
	wantCode(t, err, protocol.CodeInvalidRequest)
	if de := new(idkeeper.Error); !errors.As(err, &de) || de.Field != "oldPassword" {
		t.Fatalf("wrong old password: %v", err)
	}
	_, err = e.acc.ChangePassword(actx, bob, bobPW, "short")
	wantCode(t, err, protocol.CodeInvalidRequest)
	e.wantSession(t, tok, true)
	if _, err := e.acc.ChangePassword(actx, bob, bobPW, "a new password 2"); err != nil {
		t.Fatal(err)
	}
	e.wantSession(t, tok, false)
	e.wantSession(t, other, false)
	_, _, err = e.acc.Login(actx, "bob", bobPW, "192.0.2.2", "")
	wantCode(t, err, protocol.CodeLoginFailed)
	tok = e.login(t, "bob", "a new password 2", "192.0.2.2")

	// An admin's reset and a role change end them too.
	if _, err := e.acc.ResetPassword(actx, e.root, "bob", "reset password 3"); err != nil {
		t.Fatal(err)
	}
	e.wantSession(t, tok, false)
	tok = e.login(t, "bob", "reset password 3", "192.0.2.2")
	if _, err := e.acc.SetRole(actx, e.root, "bob", account.RoleViewer); err != nil {
		t.Fatal(err)
	}
	e.wantSession(t, tok, false)
	// The same role again is no change: sessions stay.
	tok = e.login(t, "bob", "reset password 3", "192.0.2.2")
	if _, err := e.acc.SetRole(actx, e.root, "bob", account.RoleViewer); err != nil {
		t.Fatal(err)
	}
	e.wantSession(t, tok, true)
}

func TestRoleChecks(t *testing.T) {
	e := newAcctEnv(t)
	viewer, op := e.addUser(t, "vic", account.RoleViewer), e.addUser(t, "otto", account.RoleOperator)
	for _, actor := range []account.User{viewer, op} {
		_, err := e.acc.CreateUser(actx, actor, "eve", account.RoleAdmin, bobPW)
		wantCode(t, err, protocol.CodeForbidden)
		_, err = e.acc.SetRole(actx, actor, actor.Name, account.RoleAdmin)
		wantCode(t, err, protocol.CodeForbidden)
		_, err = e.acc.SetDisabled(actx, actor, "root", true)
		wantCode(t, err, protocol.CodeForbidden)
		_, err = e.acc.ResetPassword(actx, actor, "root", "taken over 123")
		wantCode(t, err, protocol.CodeForbidden)
	}
	// A stale actor record counts as what the store says now.
	stale := e.addUser(t, "ann", account.RoleAdmin)
	if _, err := e.acc.SetRole(actx, e.root, "ann", account.RoleViewer); err != nil {
		t.Fatal(err)
	}
	_, err := e.acc.CreateUser(actx, stale, "eve", account.RoleAdmin, bobPW)
	wantCode(t, err, protocol.CodeForbidden)

	// Anyone changes their own password.
	if _, err := e.acc.ChangePassword(actx, viewer, bobPW, "vic's new password"); err != nil {
		t.Fatal(err)
	}
	// Argument checks.
	_, err = e.acc.CreateUser(actx, e.root, "Eve", account.RoleViewer, bobPW)
	wantCode(t, err, protocol.CodeInvalidRequest)
	_, err = e.acc.CreateUser(actx, e.root, "eve", "root", bobPW)
	wantCode(t, err, protocol.CodeInvalidRequest)
	_, err = e.acc.CreateUser(actx, e.root, "eve", account.RoleViewer, "short")
	wantCode(t, err, protocol.CodeInvalidRequest)
	_, err = e.acc.CreateUser(actx, e.root, "vic", account.RoleViewer, bobPW)
	wantCode(t, err, protocol.CodeConflict)
	_, err = e.acc.SetRole(actx, e.root, "nobody", account.RoleViewer)
	wantCode(t, err, protocol.CodeNotFound)
	_, err = e.acc.ResetPassword(actx, e.root, "nobody", "some password 1")
	wantCode(t, err, protocol.CodeNotFound)

	users, err := e.acc.Users(actx)
	if err != nil || len(users) != 4 {
		t.Fatalf("Users: %d, %v", len(users), err)
	}
	for _, u := range users {
		if u.PasswordHash != "" {
			t.Fatalf("Users shows a hash: %+v", u)
		}
	}
}

func TestLastAdminProtected(t *testing.T) {
	e := newAcctEnv(t)
	_, err := e.acc.SetDisabled(actx, e.root, "root", true)
	wantCode(t, err, protocol.CodeForbidden)
	_, err = e.acc.SetRole(actx, e.root, "root", account.RoleOperator)
	wantCode(t, err, protocol.CodeForbidden)
	_, err = e.acc.ResetPassword(actx, e.root, "root", "my own reset 123")
	wantCode(t, err, protocol.CodeForbidden)

	// Two admins demoting each other at once: one stays.
	ann := e.addUser(t, "ann", account.RoleAdmin)
	var wg sync.WaitGroup
	wg.Go(func() { _, _ = e.acc.SetRole(actx, e.root, "ann", account.RoleViewer) })
	wg.Go(func() { _, _ = e.acc.SetDisabled(actx, ann, "root", true) })
	wg.Wait()
	users, _ := e.store.Users(actx)
	admins := 0
	for _, u := range users {
		if u.Role == account.RoleAdmin && !u.Disabled {
			admins++
		}
	}
	if admins != 1 {
		t.Fatalf("%d enabled admins: %+v", admins, users)
	}
}

func TestAuditChainAndConcurrentAppends(t *testing.T) {
	e := newAcctEnv(t)
	e.addUser(t, "bob", account.RoleViewer)
	ctx := audit.WithRemoteIP(actx, "192.0.2.50")
	if _, err := e.acc.SetRole(ctx, e.root, "bob", account.RoleOperator); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			err := e.acc.Audit(actx, audit.Entry{Actor: "system", Action: audit.LeaseReclaim,
				Target: "node:" + string(rune('0'+i%10))})
			if err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	log := e.auditLog(t)
	want := []string{audit.UserCreate, audit.UserCreate, audit.UserUpdate}
	if len(log) != len(want)+16 {
		t.Fatalf("%d entries, want %d", len(log), len(want)+16)
	}
	for i, a := range want {
		if log[i].Action != a {
			t.Fatalf("entry %d: %+v, want %s", i, log[i], a)
		}
	}
	if c := log[0]; c.Actor != "system" || c.Target != "user:root" {
		t.Fatalf("first admin entry %+v", c)
	}
	if c := log[1]; c.Actor != "user:root" || c.Target != "user:bob" || c.Detail != "role viewer" {
		t.Fatalf("create entry %+v", c)
	}
	if c := log[2]; c.RemoteIP != "192.0.2.50" || !strings.Contains(c.Detail, "operator") {
		t.Fatalf("update entry %+v", c)
	}
}

// A hasher of other parameters replaces an old hash at the next login.
func TestLogin_Rehashes(t *testing.T) {
	e := newAcctEnv(t)
	stronger := password.Hasher{Params: cheapParams}
	stronger.Params.Time = 2
	acc, err := account.New(e.store, stronger, account.Config{Clock: e.clk.Now, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := acc.Login(actx, "root", rootPW, "192.0.2.1", ""); err != nil {
		t.Fatal(err)
	}
	u, _ := e.store.User(actx, "root")
	if stronger.NeedsRehash(u.PasswordHash) || u.Epoch != e.root.Epoch {
		t.Fatalf("after login: %+v", u)
	}
	e.login(t, "root", rootPW, "192.0.2.1") // the old hasher verifies the new hash
}

func TestAccountsConfigRanges(t *testing.T) {
	e := newAcctEnv(t)
	h := password.Hasher{}
	for _, cfg := range []account.Config{
		{IdleTimeout: time.Second},
		{IdleTimeout: 25 * time.Hour},
		{IdleTimeout: time.Hour, AbsoluteTimeout: time.Minute},
		{AbsoluteTimeout: 31 * 24 * time.Hour},
	} {
		var re *idkeeper.RangeError
		if _, err := account.New(e.store, h, cfg); !errors.As(err, &re) {
			t.Errorf("%+v: %v, want a RangeError", cfg, err)
		}
	}
	acc, err := account.New(e.store, h, account.Config{IdleTimeout: 24 * time.Hour})
	if err != nil || acc.Config().AbsoluteTimeout != 24*time.Hour {
		t.Fatalf("%v, %+v", err, acc.Config())
	}
}
