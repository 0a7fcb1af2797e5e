package admin_test

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/admin"
)

// loopback is the floor of the envs whose tests add allow-list entries: the test
// client stays allowed whatever they add.
var loopback = func(s *setup) {
	s.floor = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}
}

// matrixCase is one route of the matrix: the request a caller sends (i tells the
// callers apart, for creates) and the status when the caller may call it.
type matrixCase struct {
	method, path string
	body         func(i int) string
	ok           int
}

func fixed(s string) func(int) string { return func(int) string { return s } }

// The role × route matrix over every route of the table: no credentials, a /v1
// key, an admin key, and viewer, operator and admin sessions. A caller the route
// refuses gets exactly 401 SESSION_EXPIRED (none), 403 ADMIN_KEY_REQUIRED (a /v1
// key) or 403 FORBIDDEN (a role below the route's, or a key on a route for
// users); a caller it admits gets the route's own answer.
func TestRoleRouteMatrix(t *testing.T) {
	e := newEnv(t, loopback)
	e.user("viewer", idkeeper.RoleViewer)
	e.user("operator", idkeeper.RoleOperator)
	e.user("boss", idkeeper.RoleAdmin)
	e.user("target", idkeeper.RoleViewer)
	e.user("matrix", idkeeper.RoleViewer)
	plainID, _ := idkeeper.HashAPIKey(plainKey)

	cases := []matrixCase{
		{"GET", "/admin/api/me", nil, 200},
		{"POST", "/admin/api/me/password", fixed(`{"oldPassword":"wrong-password-000","newPassword":"another-password-1"}`), 400},
		{"POST", "/admin/api/me/webhook", fixed(`{"url":"https://discord.com/api/webhooks/1/matrix-token-0123456789"}`), 200},
		{"POST", "/admin/api/me/webhook/remove", nil, 204},
		{"POST", "/admin/api/me/webhook/test", nil, 409}, // removed just before: WEBHOOK_NOT_SET
		{"GET", "/admin/api/users", nil, 200},
		{"POST", "/admin/api/users", func(i int) string {
			return fmt.Sprintf(`{"name":"made-%d","role":"viewer","password":"%s"}`, i, userPW)
		}, 201},
		{"POST", "/admin/api/users/target", fixed(`{"disabled":false}`), 200},
		{"POST", "/admin/api/users/target/password", fixed(`{"password":"target-password-99"}`), 204},
		{"GET", "/admin/api/keys", nil, 200},
		{"POST", "/admin/api/keys", func(i int) string { return fmt.Sprintf(`{"description":"matrix %d"}`, i) }, 201},
		{"GET", "/admin/api/keys/" + plainID, nil, 200},
		{"POST", "/admin/api/keys/" + plainID, fixed(`{"maxNodes":5}`), 200},
		{"POST", "/admin/api/keys/0000000000000000/revoke", nil, 404},
		{"GET", "/admin/api/allowlist", nil, 200},
		{"POST", "/admin/api/allowlist", func(i int) string {
			return fmt.Sprintf(`{"prefix":"198.51.100.%d","note":"matrix"}`, i)
		}, 201},
		{"POST", "/admin/api/allowlist/remove", fixed(`{"prefix":"203.0.113.0/24"}`), 404},
		{"GET", "/admin/api/pool", nil, 200},
		{"GET", "/admin/api/leases", nil, 200},
		{"POST", "/admin/api/leases/5/revoke", fixed(`{"fencingToken":1}`), 404},
		{"GET", "/admin/api/nodes/5", nil, 200},
		{"GET", "/admin/api/ids/0000000000000000/origin", nil, 200},
		{"GET", "/admin/api/audit", nil, 200},
		{"GET", "/admin/api/store", nil, 200},
		{"GET", "/admin/api/backup", nil, 200},
		{"POST", "/admin/api/restore", nil, 400}, // an empty file: refused, nothing written
		{"GET", "/admin/api/backups", nil, 200},
		{"POST", "/admin/api/backups", nil, 201},
		// "{name}" is sent as it stands (%7Bname%7D): no backup is named so.
		{"GET", "/admin/api/backups/{name}", nil, 404},
		{"POST", "/admin/api/backups/{name}/delete", nil, 404},
		// Last: they end or replace the caller's session.
		{"POST", "/admin/api/login", fixed(`{"name":"matrix","password":"` + userPW + `"}`), 200},
		{"POST", "/admin/api/logout", nil, 204},
	}
	routes := admin.Routes(e.h)
	var want, got []string
	for _, rt := range routes {
		want = append(want, rt.Method+" "+rt.Path)
	}
	for _, c := range cases {
		got = append(got, c.method+" "+strings.NewReplacer(plainID, "{id}", "0000000000000000", "{id}", "/5/", "/{node}/", "nodes/5", "nodes/{node}",
			"users/target", "users/{name}").Replace(c.path))
	}
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(want, got) {
		t.Fatalf("the matrix covers\n%v\nthe table has\n%v", got, want)
	}
	info := func(c matrixCase) admin.RouteInfo {
		for _, rt := range routes {
			if rt.Method+" "+rt.Path == c.method+" "+strings.NewReplacer(plainID, "{id}", "0000000000000000", "{id}",
				"/5/", "/{node}/", "nodes/5", "nodes/{node}", "users/target", "users/{name}").Replace(c.path) {
				return rt
			}
		}
		t.Fatalf("no route for %s %s", c.method, c.path)
		return admin.RouteInfo{}
	}

	type caller struct {
		name string
		hdr  []string
		role idkeeper.Role // "" for none and the /v1 key
		key  bool
	}
	callers := []caller{
		{"none", nil, "", false},
		{"v1 key", []string{"X-API-Key", plainKey}, "", true},
		{"admin key", []string{"X-API-Key", adminKey}, idkeeper.RoleAdmin, true},
		{"viewer", []string{"Cookie", e.login("viewer", userPW)}, idkeeper.RoleViewer, false},
		{"operator", []string{"Cookie", e.login("operator", userPW)}, idkeeper.RoleOperator, false},
		{"admin", []string{"Cookie", e.login("boss", userPW)}, idkeeper.RoleAdmin, false},
	}
	for i, cl := range callers {
		for _, c := range cases {
			rt := info(c)
			body := ""
			if c.body != nil {
				body = c.body(i)
			}
			r := e.do(c.method, c.path, body, cl.hdr...)
			name := fmt.Sprintf("%s: %s %s", cl.name, c.method, c.path)
			switch {
			case rt.Role == "":
				if r.status != c.ok {
					t.Errorf("%s (public): %d, want %d: %s", name, r.status, c.ok, r.raw)
				}
			case cl.name == "none":
				expect(t, name, r, idkeeper.CodeSessionExpired)
			case cl.name == "v1 key":
				expect(t, name, r, idkeeper.CodeAdminKeyRequired)
			case rt.UserOnly && cl.key, !cl.role.AtLeast(rt.Role):
				expect(t, name, r, idkeeper.CodeForbidden)
			case r.status != c.ok:
				t.Errorf("%s: %d, want %d: %s", name, r.status, c.ok, r.raw)
			}
		}
	}
	// The refused callers changed nothing: one user made by the admin session,
	// one key per caller admitted (admin key, operator, admin).
	users, _ := e.acct.Users(context.Background())
	if n := countPrefix(users, "made-"); n != 1 {
		t.Errorf("%d users made, want 1", n)
	}
	keys, _ := e.reg.Keys(context.Background())
	if len(keys) != 2+3 {
		t.Errorf("%d keys, want 5", len(keys))
	}
}

func countPrefix(us []idkeeper.User, prefix string) int {
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
	e.user("operator", idkeeper.RoleOperator)
	tok := e.login("operator", userPW)
	body := `{"description":"csrf"}`
	e.do("POST", "/admin/api/keys", body, "Cookie", tok, "Sec-Fetch-Site", "cross-site", "Origin", "https://evil.example").
		problem(t, idkeeper.CodeForbidden)
	e.do("POST", "/admin/api/keys", body, "Cookie", tok, "Origin", "https://evil.example").problem(t, idkeeper.CodeForbidden)
	e.do("POST", "/admin/api/login", `{"name":"operator","password":"`+userPW+`"}`, "Sec-Fetch-Site", "cross-site").
		problem(t, idkeeper.CodeForbidden)
	e.do("POST", "/admin/api/logout", "", "Cookie", tok, "Sec-Fetch-Site", "cross-site").problem(t, idkeeper.CodeForbidden)
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
	e.do("GET", "/admin/api/nope", "").problem(t, idkeeper.CodeNotFound)
	r := e.do("DELETE", "/admin/api/keys", "").problem(t, idkeeper.CodeMethodNotAllowed)
	if r.header.Get("Allow") != "GET, HEAD, POST" {
		t.Fatalf("Allow %q", r.header.Get("Allow"))
	}
	r = e.do("GET", "/admin/api/login", "").problem(t, idkeeper.CodeMethodNotAllowed)
	if r.header.Get("Allow") != "POST" {
		t.Fatalf("Allow %q", r.header.Get("Allow"))
	}
}
