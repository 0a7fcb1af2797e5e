package admin_test

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/account"
	"github.com/idkeeper/idkeeper/admin"
	"github.com/idkeeper/idkeeper/apikey"
	"github.com/idkeeper/idkeeper/protocol"
)

// loopback is the floor of the envs whose tests add allow-list entries: the test
// client stays allowed whatever they add.
var loopback = func(s *setup) {
	s.floor = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}
}

// matrixCase is one request of the matrix: what a caller sends (i tells the
// callers apart, for creates) and the status each caller gets, as literals in
// the order of the callers (none, /v1 key, admin key, viewer, operator, admin
// session). extra marks a second request to a route the matrix covers already
// (another body or query).
type matrixCase struct {
	method, path string
	body         func(i int) string
	want         [6]int
	extra        bool
}

func fixed(s string) func(int) string { return func(int) string { return s } }

// The role × route matrix over every route of the table (issue #29 rechecked it):
// no credentials, a /v1 key (keys have no role but admin: a key that is not an
// admin key is the only other kind), an admin key, and viewer, operator and
// admin sessions, each with the status written out. A refused caller gets
// exactly 401 SESSION_EXPIRED (none), 403 ADMIN_KEY_REQUIRED (a /v1 key) or 403
// FORBIDDEN (a role below the route's, a key on a route for users, an operator
// on an admin key or a full backup); an admitted one the route's own answer.
func TestRoleRouteMatrix(t *testing.T) {
	e := newEnv(t, loopback)
	e.user("viewer", account.RoleViewer)
	e.user("operator", account.RoleOperator)
	e.user("boss", account.RoleAdmin)
	e.user("target", account.RoleViewer)
	e.user("matrix", account.RoleViewer)
	plainID, _ := idkeeper.HashAPIKey(plainKey)
	_, spare, err := apikey.NewAdmin(e.reg).Create(context.Background(), apikey.Spec{Description: "spare admin key", Admin: true})
	if err != nil {
		t.Fatal(err)
	}
	const (
		none = 401 // SESSION_EXPIRED
		no   = 403 // ADMIN_KEY_REQUIRED for the /v1 key, FORBIDDEN for the others
	)
	cases := []matrixCase{
		{"GET", "/admin/api/me", nil, [6]int{none, no, 200, 200, 200, 200}, false},
		{"POST", "/admin/api/me/password", fixed(`{"oldPassword":"wrong-password-000","newPassword":"another-password-1"}`),
			[6]int{none, no, no, 400, 400, 400}, false},
		{"POST", "/admin/api/me/webhook", fixed(`{"url":"https://discord.com/api/webhooks/1/matrix-token-0123456789"}`),
			[6]int{none, no, no, 200, 200, 200}, false},
		{"POST", "/admin/api/me/webhook/remove", nil, [6]int{none, no, no, 204, 204, 204}, false},
		{"POST", "/admin/api/me/webhook/test", nil, [6]int{none, no, no, 409, 409, 409}, false}, // removed just before: WEBHOOK_NOT_SET
		{"GET", "/admin/api/users", nil, [6]int{none, no, 200, 200, 200, 200}, false},
		{"POST", "/admin/api/users", func(i int) string {
			return fmt.Sprintf(`{"name":"made-%d","role":"viewer","password":"%s"}`, i, userPW)
		}, [6]int{none, no, no, no, no, 201}, false},
		{"POST", "/admin/api/users/target", fixed(`{"disabled":false}`), [6]int{none, no, no, no, no, 200}, false},
		{"POST", "/admin/api/users/target/password", fixed(`{"password":"target-password-99"}`), [6]int{none, no, no, no, no, 204}, false},
		{"GET", "/admin/api/keys", nil, [6]int{none, no, 200, 200, 200, 200}, false},
		{"POST", "/admin/api/keys", func(i int) string { return fmt.Sprintf(`{"description":"matrix %d"}`, i) },
			[6]int{none, no, 201, no, 201, 201}, false},
		// Only an admin makes an admin key.
		{"POST", "/admin/api/keys", func(i int) string { return fmt.Sprintf(`{"description":"admin %d","admin":true}`, i) },
			[6]int{none, no, 201, no, no, 201}, true},
		{"GET", "/admin/api/keys/" + plainID, nil, [6]int{none, no, 200, 200, 200, 200}, false},
		{"POST", "/admin/api/keys/" + plainID, fixed(`{"maxNodes":5}`), [6]int{none, no, 200, no, 200, 200}, false},
		// Nobody raises a key to admin; only an admin changes or revokes an admin
		// key (the admin key revokes the spare one before the admin session's
		// turn, whose change then finds it revoked: 409).
		{"POST", "/admin/api/keys/" + plainID, fixed(`{"admin":true}`), [6]int{none, no, 400, no, 400, 400}, true},
		{"POST", "/admin/api/keys/" + spare.ID, fixed(`{"maxNodes":3}`), [6]int{none, no, 200, no, no, 409}, true},
		{"POST", "/admin/api/keys/0000000000000000/revoke", nil, [6]int{none, no, 404, no, 404, 404}, false},
		{"POST", "/admin/api/keys/" + spare.ID + "/revoke", nil, [6]int{none, no, 200, no, no, 200}, true},
		{"GET", "/admin/api/allowlist", nil, [6]int{none, no, 200, 200, 200, 200}, false},
		{"POST", "/admin/api/allowlist", func(i int) string {
			return fmt.Sprintf(`{"prefix":"198.51.100.%d","note":"matrix"}`, i)
		}, [6]int{none, no, 201, no, 201, 201}, false},
		{"POST", "/admin/api/allowlist/remove", fixed(`{"prefix":"203.0.113.0/24"}`), [6]int{none, no, 404, no, 404, 404}, false},
		{"GET", "/admin/api/pool", nil, [6]int{none, no, 200, 200, 200, 200}, false},
		{"GET", "/admin/api/leases", nil, [6]int{none, no, 200, 200, 200, 200}, false},
		{"POST", "/admin/api/leases/5/revoke", fixed(`{"fencingToken":1}`), [6]int{none, no, 404, no, 404, 404}, false},
		{"GET", "/admin/api/nodes/5", nil, [6]int{none, no, 200, 200, 200, 200}, false},
		{"GET", "/admin/api/ids/0000000000000000/origin", nil, [6]int{none, no, 200, 200, 200, 200}, false},
		{"GET", "/admin/api/audit", nil, [6]int{none, no, 200, 200, 200, 200}, false},
		{"GET", "/admin/api/store", nil, [6]int{none, no, 200, 200, 200, 200}, false},
		// A full backup is an admin's; a redacted one an operator's too.
		{"GET", "/admin/api/backup", nil, [6]int{none, no, 200, no, no, 200}, false},
		{"GET", "/admin/api/backup?redacted=1", nil, [6]int{none, no, 200, no, 200, 200}, true},
		// A restore: an admin's session only (an empty file: refused; no
		// password: refused), nothing written.
		{"POST", "/admin/api/restore/preview", nil, [6]int{none, no, no, no, no, 400}, false},
		{"POST", "/admin/api/restore", fixed(`{"preview":"00000000000000000000000000000000","sha256":"00"}`),
			[6]int{none, no, no, no, no, 400}, false},
		{"GET", "/admin/api/backups", nil, [6]int{none, no, 200, no, 200, 200}, false},
		{"POST", "/admin/api/backups", nil, [6]int{none, no, 201, no, no, 201}, false},
		// The schedule: seen as the folder, changed as a backup is made (the same
		// text as stored: no change, so every admin's call finds version 1).
		{"GET", "/admin/api/backups/schedule", nil, [6]int{none, no, 200, no, 200, 200}, false},
		{"PUT", "/admin/api/backups/schedule", fixed(`{"schedule":"@daily","version":1}`), [6]int{none, no, 200, no, no, 200}, false},
		// "{name}" is sent as it stands (%7Bname%7D): no backup is named so.
		{"GET", "/admin/api/backups/{name}", nil, [6]int{none, no, 404, no, no, 404}, false},
		{"POST", "/admin/api/backups/{name}/delete", nil, [6]int{none, no, 404, no, no, 404}, false},
		// Last: they end or replace the caller's session.
		{"POST", "/admin/api/login", fixed(`{"name":"matrix","password":"` + userPW + `"}`), [6]int{200, 200, 200, 200, 200, 200}, false},
		{"POST", "/admin/api/logout", nil, [6]int{204, 204, 204, 204, 204, 204}, false},
	}
	pattern := strings.NewReplacer(plainID, "{id}", spare.ID, "{id}", "0000000000000000", "{id}", "/5/", "/{node}/",
		"nodes/5", "nodes/{node}", "users/target", "users/{name}", "?redacted=1", "")
	var want, got []string
	for _, rt := range admin.Routes(e.h) {
		want = append(want, rt.Method+" "+rt.Path)
	}
	for _, c := range cases {
		if !c.extra {
			got = append(got, c.method+" "+pattern.Replace(c.path))
		}
	}
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(want, got) {
		t.Fatalf("the matrix covers\n%v\nthe table has\n%v", got, want)
	}

	type caller struct {
		name string
		hdr  []string
	}
	callers := []caller{
		{"none", nil},
		{"v1 key", []string{"X-API-Key", plainKey}},
		{"admin key", []string{"X-API-Key", adminKey}},
		{"viewer", []string{"Cookie", e.login("viewer", userPW)}},
		{"operator", []string{"Cookie", e.login("operator", userPW)}},
		{"admin", []string{"Cookie", e.login("boss", userPW)}},
	}
	for i, cl := range callers {
		for _, c := range cases {
			body := ""
			if c.body != nil {
				body = c.body(i)
			}
			r := e.do(c.method, c.path, body, cl.hdr...)
			name := fmt.Sprintf("%s: %s %s", cl.name, c.method, c.path)
			switch w := c.want[i]; {
			case r.status != w:
				t.Errorf("%s: %d, want %d: %s", name, r.status, w, r.raw)
			case w == none:
				expect(t, name, r, protocol.CodeSessionExpired)
			case w == no && cl.name == "v1 key":
				expect(t, name, r, protocol.CodeAdminKeyRequired)
			case w == no:
				expect(t, name, r, protocol.CodeForbidden)
			}
		}
	}
	// The refused callers changed nothing: one user made by the admin session;
	// keys: the two of the env, the spare admin key, one plain key per caller
	// admitted (admin key, operator, admin), one admin key each by the admin key
	// and the admin session; the spare admin key revoked, never by the operator.
	ctx := context.Background()
	users, _ := e.acct.Users(ctx)
	if n := countPrefix(users, "made-"); n != 1 {
		t.Errorf("%d users made, want 1", n)
	}
	keys, _ := e.reg.Keys(ctx)
	admins := 0
	for _, k := range keys {
		if k.Key.Admin {
			admins++
		}
	}
	if len(keys) != 3+3+2 || admins != 2+2 {
		t.Errorf("%d keys (%d admin keys), want 8 (4)", len(keys), admins)
	}
	if k, _ := e.reg.Key(ctx, plainID); k.Key.Admin {
		t.Error("the /v1 key was raised to admin")
	}
	es, _ := e.store.AuditEntriesBefore(ctx, 0, 1000)
	for _, x := range es {
		if x.Target == "key:"+spare.ID && x.Actor == "user:operator" {
			t.Errorf("the operator changed the admin key: %+v", x)
		}
	}
}

func countPrefix(us []account.User, prefix string) int {
	n := 0
	for _, u := range us {
		if strings.HasPrefix(u.Name, prefix) {
			n++
		}
	}
	return n
}

func expect(t *testing.T, name string, r response, code idkeeper.Code) {
	t.Helper()
	if r.str("code") != string(code) {
		t.Errorf("%s: %d %s, want %s", name, r.status, r.raw, code)
		return
	}
	r.problem(t, code)
}

// A state change from another site is refused (403 FORBIDDEN, nothing done),
// whether the browser says so in Sec-Fetch-Site or only the Origin tells; the
// same request from the admin web's own origin works, and so does a client that
// is no browser (no Origin, no Sec-Fetch-Site). A GET is never refused.
func TestCrossSitePostRefused(t *testing.T) {
	e := newEnv(t)
	e.user("operator", account.RoleOperator)
	tok := e.login("operator", userPW)
	body := `{"description":"csrf"}`
	e.do("POST", "/admin/api/keys", body, "Cookie", tok, "Sec-Fetch-Site", "cross-site", "Origin", "https://evil.example").
		problem(t, protocol.CodeForbidden)
	e.do("POST", "/admin/api/keys", body, "Cookie", tok, "Origin", "https://evil.example").problem(t, protocol.CodeForbidden)
	e.do("POST", "/admin/api/login", `{"name":"operator","password":"`+userPW+`"}`, "Sec-Fetch-Site", "cross-site").
		problem(t, protocol.CodeForbidden)
	e.do("POST", "/admin/api/logout", "", "Cookie", tok, "Sec-Fetch-Site", "cross-site").problem(t, protocol.CodeForbidden)
	if ks, _ := e.reg.Keys(context.Background()); len(ks) != 2 {
		t.Fatalf("a cross-site POST made a key: %d keys", len(ks))
	}
	e.do("GET", "/admin/api/keys", "", "Cookie", tok, "Sec-Fetch-Site", "cross-site").ok(t)
	e.do("POST", "/admin/api/keys", body, "Cookie", tok, "Sec-Fetch-Site", "same-origin", "Origin", e.srv.URL).status1(t, 201)
	e.do("POST", "/admin/api/keys", body, "Cookie", tok, "Origin", e.srv.URL).status1(t, 201)
	e.do("POST", "/admin/api/keys", body, "Cookie", tok).status1(t, 201)
	// The session survived the refused logout.
	e.do("GET", "/admin/api/me", "", "Cookie", tok).ok(t)
}

// Paths without a route and routes called with another method are problem+json.
func TestNoRoute(t *testing.T) {
	e := newEnv(t)
	e.do("GET", "/admin/api/nope", "").problem(t, protocol.CodeNotFound)
	r := e.do("DELETE", "/admin/api/keys", "").problem(t, protocol.CodeMethodNotAllowed)
	if r.header.Get("Allow") != "GET, HEAD, POST" {
		t.Fatalf("Allow %q", r.header.Get("Allow"))
	}
	r = e.do("GET", "/admin/api/login", "").problem(t, protocol.CodeMethodNotAllowed)
	if r.header.Get("Allow") != "POST" {
		t.Fatalf("Allow %q", r.header.Get("Allow"))
	}
}
