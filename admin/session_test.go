package admin_test

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper/account"
	"github.com/idkeeper/idkeeper/admin"
	"github.com/idkeeper/idkeeper/audit"
	"github.com/idkeeper/idkeeper/internal/wire"
	"github.com/idkeeper/idkeeper/protocol"
)

// Login answers the user and sets a session cookie (HttpOnly, SameSite=Strict,
// Path=/, no Secure and no __Host- prefix over plain HTTP); the name is trimmed
// and lower-cased; each login is a new session and ends the one the request's
// cookie held; logout ends the session and clears the cookie.
func TestLoginLogout(t *testing.T) {
	e := newEnv(t)
	e.user("alice", account.RoleOperator)
	r := e.do("POST", "/admin/api/login", `{"name":"  Alice ","password":"`+userPW+`"}`).ok(t)
	var lr wire.LoginResponse
	r.decode(t, &lr)
	if lr.User.Name != "alice" || lr.User.Role != "operator" {
		t.Fatalf("login answered %s", r.raw)
	}
	c := sessionCookie(t, r, false)
	if c.Name != "idkeeper_session" || !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Path != "/" || c.Secure ||
		c.MaxAge != 0 || c.Domain != "" || len(c.Value) != 43 {
		t.Fatalf("cookie %+v", c)
	}
	var me wire.Me
	e.do("GET", "/admin/api/me", "", "Cookie", c.Value).ok(t).decode(t, &me)
	if me.Name != "alice" || me.Role != "operator" || me.Kind != "user" || me.LastLoginAt == nil || *me.LastLoginAt != ts(start) ||
		me.CreatedAt != ts(start) || me.PasswordChangedAt == nil {
		t.Fatalf("me: %+v", me)
	}

	// A second login with the first session's cookie: a new session, the old one ended.
	r = e.do("POST", "/admin/api/login", `{"name":"alice","password":"`+userPW+`"}`, "Cookie", c.Value).ok(t)
	c2 := sessionCookie(t, r, false)
	if c2.Value == c.Value {
		t.Fatal("the login kept the session")
	}
	e.do("GET", "/admin/api/me", "", "Cookie", c.Value).problem(t, protocol.CodeSessionExpired)
	e.do("GET", "/admin/api/me", "", "Cookie", c2.Value).ok(t)

	r = e.do("POST", "/admin/api/logout", "", "Cookie", c2.Value).status1(t, 204)
	if gone := sessionCookie(t, r, false); gone.MaxAge >= 0 || gone.Value != "" {
		t.Fatalf("logout set %+v", gone)
	}
	e.do("GET", "/admin/api/me", "", "Cookie", c2.Value).problem(t, protocol.CodeSessionExpired)
	e.do("POST", "/admin/api/logout", "", "Cookie", c2.Value).status1(t, 204) // again: nothing to end

	// One message for every cause.
	wrong := e.do("POST", "/admin/api/login", `{"name":"alice","password":"not-her-password"}`).problem(t, protocol.CodeLoginFailed)
	unknown := e.do("POST", "/admin/api/login", `{"name":"nobody","password":"not-her-password"}`).problem(t, protocol.CodeLoginFailed)
	if wrong.str("detail") != unknown.str("detail") || len(wrong.header.Values("Set-Cookie")) != 0 {
		t.Fatalf("%s vs %s", wrong.raw, unknown.raw)
	}
	e.do("POST", "/admin/api/login", `{"name":"alice","password":"x","extra":1}`).problem(t, protocol.CodeInvalidRequest)
	e.do("GET", "/admin/api/me", "").problem(t, protocol.CodeSessionExpired)
	e.do("GET", "/admin/api/me", "", "Cookie", "idkeeper_session=forged").problem(t, protocol.CodeSessionExpired)

	// The logins are audited by Accounts, once each.
	n := 0
	for _, x := range e.auditAll("X-API-Key", adminKey) {
		if x.Action == audit.Login && x.Target == "user:alice" {
			n++
			if x.RemoteIP != "127.0.0.1" {
				t.Errorf("login audited from %q", x.RemoteIP)
			}
		}
	}
	if n != 2 {
		t.Errorf("%d logins audited, want 2", n)
	}
}

// Over TLS the cookie is Secure and named __Host-idkeeper_session.
func TestCookieTLS(t *testing.T) {
	e := newEnv(t, func(s *setup) { s.tls = true })
	e.user("alice", account.RoleViewer)
	r := e.do("POST", "/admin/api/login", `{"name":"alice","password":"`+userPW+`"}`).ok(t)
	c := sessionCookie(t, r, true)
	if c.Name != "__Host-idkeeper_session" || !c.Secure || !c.HttpOnly || c.SameSite != http.SameSiteStrictMode ||
		c.Path != "/" || c.Domain != "" {
		t.Fatalf("cookie %+v (%q)", c, r.header.Values("Set-Cookie"))
	}
	if admin.CookieName(true) != c.Name || admin.CookieName(false) != "idkeeper_session" {
		t.Fatal("CookieName")
	}
	e.do("GET", "/admin/api/me", "", "Cookie", c.Value).ok(t)
	r = e.do("POST", "/admin/api/logout", "", "Cookie", c.Value).status1(t, 204)
	if gone := sessionCookie(t, r, true); !gone.Secure || gone.MaxAge >= 0 {
		t.Fatalf("logout set %+v", gone)
	}
}

// A session unused for the idle timeout ends (401 SESSION_EXPIRED, the cookie
// cleared); one in use lives until the absolute timeout.
func TestSessionExpires(t *testing.T) {
	e := newEnv(t)
	e.user("alice", account.RoleViewer)
	tok := e.login("alice", userPW)
	idle := e.acct.Config().IdleTimeout
	e.clk.Advance(idle - time.Minute)
	e.do("GET", "/admin/api/me", "", "Cookie", tok).ok(t) // touched: the idle end moves
	e.clk.Advance(idle - time.Minute)
	e.do("GET", "/admin/api/me", "", "Cookie", tok).ok(t)
	e.clk.Advance(idle)
	r := e.do("GET", "/admin/api/me", "", "Cookie", tok).problem(t, protocol.CodeSessionExpired)
	if c := sessionCookie(t, r, false); c.MaxAge >= 0 {
		t.Fatalf("an ended session's cookie is not cleared: %+v", c)
	}

	tok = e.login("alice", userPW)
	abs := e.acct.Config().AbsoluteTimeout
	for at := time.Duration(0); at < abs-idle; at += idle / 2 {
		e.clk.Advance(idle / 2)
		e.do("GET", "/admin/api/me", "", "Cookie", tok).ok(t)
	}
	e.clk.Advance(idle)
	e.do("GET", "/admin/api/me", "", "Cookie", tok).problem(t, protocol.CodeSessionExpired)
}

// Disabling a user drops their sessions at once; so do a new role and a password
// reset by an admin; a user's own password change ends their sessions, this one
// too (log in again with the new password).
func TestSessionsDropped(t *testing.T) {
	e := newEnv(t)
	e.user("boss", account.RoleAdmin)
	e.user("alice", account.RoleOperator)
	boss := e.login("boss", userPW)
	alice := e.login("alice", userPW)
	e.do("POST", "/admin/api/keys", `{"description":"before"}`, "Cookie", alice).status1(t, 201)

	e.do("POST", "/admin/api/users/alice", `{"disabled":true}`, "Cookie", boss).ok(t)
	e.do("GET", "/admin/api/me", "", "Cookie", alice).problem(t, protocol.CodeSessionExpired)
	e.do("POST", "/admin/api/keys", `{"description":"after"}`, "Cookie", alice).problem(t, protocol.CodeSessionExpired)
	e.do("POST", "/admin/api/login", `{"name":"alice","password":"`+userPW+`"}`).problem(t, protocol.CodeLoginFailed)
	e.do("POST", "/admin/api/users/alice", `{"disabled":false}`, "Cookie", boss).ok(t)

	alice = e.login("alice", userPW)
	var u wire.User
	e.do("POST", "/admin/api/users/alice", `{"role":"viewer"}`, "Cookie", boss).ok(t).decode(t, &u)
	if u.Role != "viewer" || u.Disabled {
		t.Fatalf("%+v", u)
	}
	e.do("GET", "/admin/api/me", "", "Cookie", alice).problem(t, protocol.CodeSessionExpired)

	alice = e.login("alice", userPW)
	e.do("POST", "/admin/api/users/alice/password", `{"password":"reset-password-1234"}`, "Cookie", boss).status1(t, 204)
	e.do("GET", "/admin/api/me", "", "Cookie", alice).problem(t, protocol.CodeSessionExpired)

	alice = e.login("alice", "reset-password-1234")
	other := e.login("alice", "reset-password-1234")
	r := e.do("POST", "/admin/api/me/password", `{"oldPassword":"reset-password-1234","newPassword":"my-own-password-1"}`,
		"Cookie", alice).status1(t, 204)
	if c := sessionCookie(t, r, false); c.MaxAge >= 0 {
		t.Fatalf("cookie kept: %+v", c)
	}
	e.do("GET", "/admin/api/me", "", "Cookie", alice).problem(t, protocol.CodeSessionExpired)
	e.do("GET", "/admin/api/me", "", "Cookie", other).problem(t, protocol.CodeSessionExpired)
	e.login("alice", "my-own-password-1")

	// Admins cannot demote or disable themselves; their own password goes
	// through me/password.
	e.do("POST", "/admin/api/users/boss", `{"disabled":true}`, "Cookie", boss).problem(t, protocol.CodeForbidden)
	e.do("POST", "/admin/api/users/boss/password", `{"password":"whatever-password-1"}`, "Cookie", boss).problem(t, protocol.CodeForbidden)
	e.do("POST", "/admin/api/users/nobody", `{"role":"viewer"}`, "Cookie", boss).problem(t, protocol.CodeNotFound)
	e.do("POST", "/admin/api/users/alice", `{}`, "Cookie", boss).problem(t, protocol.CodeInvalidRequest)
	e.do("POST", "/admin/api/users/alice", `{"role":"god"}`, "Cookie", boss).problem(t, protocol.CodeInvalidRequest)
}

// Five wrong passwords for an account: the sixth attempt is refused without a
// check (401 LOGIN_FAILED with Retry-After), even with the right password, until
// the window ends.
func TestBruteForceThrottled(t *testing.T) {
	e := newEnv(t)
	e.user("alice", account.RoleViewer)
	for i := range account.LoginPairFailures {
		r := e.do("POST", "/admin/api/login", fmt.Sprintf(`{"name":"alice","password":"guess-number-%d"}`, i)).
			problem(t, protocol.CodeLoginFailed)
		if r.header.Get("Retry-After") != "" {
			t.Fatalf("attempt %d throttled already", i+1)
		}
	}
	r := e.do("POST", "/admin/api/login", `{"name":"alice","password":"guess-number-6"}`).problem(t, protocol.CodeLoginFailed)
	if s, _ := strconv.Atoi(r.header.Get("Retry-After")); s <= 0 || s > int(account.LoginThrottleWindow.Seconds()) {
		t.Fatalf("Retry-After %q", r.header.Get("Retry-After"))
	}
	r = e.do("POST", "/admin/api/login", `{"name":"alice","password":"`+userPW+`"}`).problem(t, protocol.CodeLoginFailed)
	if r.header.Get("Retry-After") == "" || len(r.header.Values("Set-Cookie")) != 0 {
		t.Fatalf("the right password while throttled: %v %s", r.header, r.raw)
	}
	e.clk.Advance(account.LoginThrottleWindow)
	e.login("alice", userPW)
}

// The login throttle counts by the TCP peer: an X-Forwarded-For from a peer that
// is no trusted proxy changes nothing, so a client cannot spread its guesses over
// made-up addresses. From a trusted proxy the forwarded address counts.
func TestSpoofedForwardedForIgnored(t *testing.T) {
	e := newEnv(t)
	for i := range account.LoginSourceFailures {
		e.do("POST", "/admin/api/login", fmt.Sprintf(`{"name":"nobody-%d","password":"guess-password"}`, i),
			"X-Forwarded-For", fmt.Sprintf("203.0.113.%d", i+1)).problem(t, protocol.CodeLoginFailed)
	}
	e.user("alice", account.RoleViewer)
	r := e.do("POST", "/admin/api/login", `{"name":"alice","password":"`+userPW+`"}`, "X-Forwarded-For", "198.51.100.7").
		problem(t, protocol.CodeLoginFailed)
	if r.header.Get("Retry-After") == "" {
		t.Fatalf("the peer is not throttled: %s", r.raw)
	}
	// The audit log recorded the real peer, not the forged address.
	for _, x := range e.auditAll("X-API-Key", adminKey) {
		if strings.HasPrefix(x.RemoteIP, "203.0.113.") {
			t.Fatalf("a forged address reached the audit log: %+v", x)
		}
	}

	p := newEnv(t, func(s *setup) { s.trusted = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")} })
	for i := range account.LoginSourceFailures {
		p.do("POST", "/admin/api/login", fmt.Sprintf(`{"name":"nobody-%d","password":"guess-password"}`, i),
			"X-Forwarded-For", "203.0.113.1").problem(t, protocol.CodeLoginFailed)
	}
	p.user("alice", account.RoleViewer)
	p.login("alice", userPW, "X-Forwarded-For", "203.0.113.2") // another client behind the proxy
	if es, _ := p.store.AuditEntriesBefore(context.Background(), 0, 1); len(es) != 1 || es[0].RemoteIP != "203.0.113.2" {
		t.Fatalf("the forwarded address is not audited: %+v", es)
	}
	r = p.do("POST", "/admin/api/login", `{"name":"alice","password":"`+userPW+`"}`, "X-Forwarded-For", "203.0.113.1").
		problem(t, protocol.CodeLoginFailed)
	if r.header.Get("Retry-After") == "" {
		t.Fatalf("the forwarded address is not throttled: %s", r.raw)
	}
}

// A wrong current password is a failed login of the account: after five the
// change is throttled (Retry-After).
func TestChangePasswordThrottled(t *testing.T) {
	e := newEnv(t)
	e.user("alice", account.RoleViewer)
	tok := e.login("alice", userPW)
	for range account.LoginPairFailures {
		r := e.do("POST", "/admin/api/me/password", `{"oldPassword":"wrong-password-0","newPassword":"new-password-0123"}`,
			"Cookie", tok).problem(t, protocol.CodeInvalidRequest)
		if r.str("field") != "oldPassword" {
			t.Fatalf("%s", r.raw)
		}
	}
	r := e.do("POST", "/admin/api/me/password", `{"oldPassword":"`+userPW+`","newPassword":"new-password-0123"}`,
		"Cookie", tok).problem(t, protocol.CodeInvalidRequest)
	if r.header.Get("Retry-After") == "" {
		t.Fatalf("not throttled: %s", r.raw)
	}
	e.do("POST", "/admin/api/me/password", `{"oldPassword":"x"}`, "X-API-Key", adminKey).problem(t, protocol.CodeForbidden)
}

// Issue #29: a common password is refused wherever one is set over the API:
// 400 PASSWORD_TOO_COMMON naming the member, and nothing changes.
func TestCommonPasswordRefusedOverTheAPI(t *testing.T) {
	e := newEnv(t)
	e.user("alice", account.RoleViewer)
	root := e.login("root", rootPW)
	for _, c := range []struct{ path, body, cookie, field string }{
		{"/admin/api/users", `{"name":"carol","role":"viewer","password":"Password1234"}`, root, "password"},
		{"/admin/api/users/alice/password", `{"password":"qwerty123456!"}`, root, "password"},
		{"/admin/api/me/password", `{"oldPassword":"` + userPW + `","newPassword":"WinnieThePooh"}`, e.login("alice", userPW), "newPassword"},
	} {
		r := e.do("POST", c.path, c.body, "Cookie", c.cookie).problem(t, protocol.CodePasswordTooCommon)
		if r.status != 400 || r.str("field") != c.field {
			t.Fatalf("%s: %d %s", c.path, r.status, r.raw)
		}
	}
	e.login("alice", userPW) // unchanged
	e.do("POST", "/admin/api/users", `{"name":"carol","role":"viewer","password":"carols-password-1"}`, "Cookie", root).status1(t, 201)
}
