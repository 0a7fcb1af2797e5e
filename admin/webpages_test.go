package admin_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper/account"
	"github.com/idkeeper/idkeeper/audit"
)

// The pages over plain HTTP: auth and redirects, roles, forms, headers, and what
// a page must never hold. browser_test.go drives them in Chromium.

// pages are the GET pages every role may load, with a text each must hold.
var pages = []struct{ path, holds string }{
	{"/admin/leases", "Node map"},
	{"/admin/keys", "API keys"},
	{"/admin/allowlist", "Trusted proxies"},
	{"/admin/users", "Users"},
	{"/admin/users/admin", "User admin"},
	{"/admin/profile", "Change your password"},
	{"/admin/audit", "Audit log"},
	{"/admin/store", "Generation"},
	{"/admin/ids", "Find an ID"},
}

var titleRE = regexp.MustCompile(`<title>([^<]+)</title>`)

// checkPage asserts a complete HTML page with a title and the page headers.
func checkPage(t *testing.T, what string, p page, status int) {
	t.Helper()
	if p.status != status {
		t.Fatalf("%s: status %d, want %d: %s", what, p.status, status, p.body)
	}
	if ct := p.header.Get("Content-Type"); ct != "text/html; charset=utf-8" {
		t.Errorf("%s: Content-Type %q", what, ct)
	}
	m := titleRE.FindStringSubmatch(p.body)
	if m == nil || !strings.HasSuffix(m[1], " · IdKeeper admin") || len(m[1]) <= len(" · IdKeeper admin") {
		t.Errorf("%s: title %q", what, m)
	}
	for k, want := range map[string]string{"Cache-Control": "no-store", "X-Frame-Options": "DENY",
		"X-Content-Type-Options": "nosniff"} {
		if got := p.header.Get(k); got != want {
			t.Errorf("%s: %s %q, want %q", what, k, got, want)
		}
	}
	if csp := p.header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") ||
		!strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe") {
		t.Errorf("%s: CSP %q", what, csp)
	}
	if !strings.Contains(p.body, `<main id="main"`) || !strings.Contains(p.body, "<h1") {
		t.Errorf("%s: no main or h1", what)
	}
}

// postForms lists the actions of the page's POST forms.
func postForms(body string) []string {
	var out []string
	for _, m := range regexp.MustCompile(`<form[^>]*method="post"[^>]*action="([^"]+)"`).FindAllStringSubmatch(body, -1) {
		out = append(out, m[1])
	}
	return out
}

func TestPagesNeedLogin(t *testing.T) {
	e := newWebEnv(t)
	c := e.client()
	for _, pg := range append(pages, struct{ path, holds string }{"/admin/leases/live", ""}) {
		p := c.get(pg.path + "?x=1")
		if want := "/admin/login?next=" + url.QueryEscape(pg.path+"?x=1"); p.status != http.StatusSeeOther || p.location() != want {
			t.Errorf("%s: %d to %q, want 303 to %q", pg.path, p.status, p.location(), want)
		}
	}
	p := c.get("/admin/")
	if p.status != http.StatusSeeOther || p.location() != "/admin/leases" {
		t.Errorf("/admin/: %d to %q", p.status, p.location())
	}
	checkPage(t, "login", c.get("/admin/login"), http.StatusOK)
	// A wrong password re-shows the form with one message for every cause.
	p = c.post("/admin/login", url.Values{"name": {"admin"}, "password": {"wrong-password-xx"}})
	checkPage(t, "failed login", p, http.StatusUnauthorized)
	if !strings.Contains(p.body, "The user name or the password is wrong") || !strings.Contains(p.body, `value="admin"`) {
		t.Errorf("failed login page: %s", p.body)
	}
	// After the login the page asked for opens; never another site.
	for next, want := range map[string]string{"/admin/keys?x=1": "/admin/keys?x=1", "//evil.example/admin/": "/admin/leases",
		"https://evil.example/admin/": "/admin/leases", "/admin/api/keys": "/admin/leases", "/elsewhere": "/admin/leases",
		"/admin/\\evil": "/admin/leases"} {
		p = e.client().post("/admin/login", url.Values{"name": {"admin"}, "password": {webAdminPW}, "next": {next}})
		if p.status != http.StatusSeeOther || p.location() != want {
			t.Errorf("next %q: %d to %q, want %q", next, p.status, p.location(), want)
		}
	}
	// Logged in, the login page sends the browser on.
	c.login("admin")
	if p = c.get("/admin/login?next=/admin/audit"); p.status != http.StatusSeeOther || p.location() != "/admin/audit" {
		t.Errorf("login page when logged in: %d to %q", p.status, p.location())
	}
	// Log out ends the session.
	p = c.post("/admin/logout", nil)
	if p.status != http.StatusSeeOther || p.location() != "/admin/login" {
		t.Fatalf("logout: %d to %q", p.status, p.location())
	}
	if p = c.get("/admin/login"); !strings.Contains(p.body, "You have logged out.") {
		t.Errorf("no logout message: %s", p.body)
	}
	if p = c.get("/admin/leases"); p.status != http.StatusSeeOther || !strings.HasPrefix(p.location(), "/admin/login?") {
		t.Errorf("after logout: %d to %q", p.status, p.location())
	}
}

func TestPagesRender(t *testing.T) {
	e := newWebEnv(t)
	e.addUser("vera", account.RoleViewer)
	e.addUser("otto", account.RoleOperator)
	for _, who := range []string{"admin", "otto", "vera"} {
		c := e.client()
		c.login(who)
		for _, pg := range pages {
			p := c.get(pg.path)
			checkPage(t, who+" "+pg.path, p, http.StatusOK)
			if !strings.Contains(p.body, pg.holds) {
				t.Errorf("%s %s: no %q", who, pg.path, pg.holds)
			}
			forms := postForms(p.body)
			// Every page has the log-out form; a viewer gets no other (no button
			// that would fail), but on the profile page.
			if len(forms) == 0 || forms[0] != "/admin/logout" {
				t.Errorf("%s %s: forms %q, want the logout first", who, pg.path, forms)
			}
			if who == "vera" && pg.path != "/admin/profile" && len(forms) != 1 {
				t.Errorf("viewer %s: forms %q", pg.path, forms)
			}
			if who == "otto" && strings.HasPrefix(pg.path, "/admin/users") && len(forms) != 1 {
				t.Errorf("operator %s: forms %q", pg.path, forms)
			}
		}
	}
	// Static files: versioned, typed.
	c := e.client()
	for name, ct := range map[string]string{"admin.css": "text/css; charset=utf-8", "admin.js": "text/javascript; charset=utf-8"} {
		p := c.get("/admin/login")
		m := regexp.MustCompile(`"(/admin/static/` + regexp.QuoteMeta(name) + `\?v=[0-9a-f]{12})"`).FindStringSubmatch(p.body)
		if m == nil {
			t.Fatalf("no versioned %s in the login page", name)
		}
		s := c.get(m[1])
		if s.status != 200 || s.header.Get("Content-Type") != ct || !strings.Contains(s.header.Get("Cache-Control"), "immutable") {
			t.Errorf("%s: %d %q %q", m[1], s.status, s.header.Get("Content-Type"), s.header.Get("Cache-Control"))
		}
	}
	if p := c.get("/admin/static/nope.js"); p.status != http.StatusNotFound {
		t.Errorf("unknown static file: %d", p.status)
	}
}

func TestPagesRoles(t *testing.T) {
	e := newWebEnv(t)
	e.addUser("vera", account.RoleViewer)
	e.addUser("otto", account.RoleOperator)
	vera, otto := e.client(), e.client()
	vera.login("vera")
	otto.login("otto")
	for _, f := range []struct {
		path string
		form url.Values
	}{
		{"/admin/keys", url.Values{"description": {"x"}}},
		{"/admin/allowlist", url.Values{"prefix": {"10.0.0.0/8"}, "note": {"x"}}},
		{"/admin/leases/revoke", url.Values{"node": {"0"}, "token": {"1"}}},
		{"/admin/users", url.Values{"name": {"x"}, "role": {"viewer"}, "password": {webAdminPW}}},
	} {
		p := vera.post(f.path, f.form)
		checkPage(t, "viewer POST "+f.path, p, http.StatusForbidden)
	}
	checkPage(t, "operator adds a user", otto.post("/admin/users", url.Values{"name": {"x"}, "role": {"viewer"},
		"password": {webAdminPW}}), http.StatusForbidden)
	checkPage(t, "viewer's revoke confirm", vera.get("/admin/leases/revoke?node=0&token=1"), http.StatusForbidden)
	// A cross-site POST is refused before anything happens, even with a session.
	p := otto.do(http.MethodPost, "/admin/keys", url.Values{"description": {"cross"}}, "Sec-Fetch-Site", "cross-site")
	if p.status != http.StatusForbidden {
		t.Errorf("cross-site POST: %d", p.status)
	}
	if keys, _ := e.reg.Keys(context.Background()); len(keys) != 0 {
		t.Errorf("keys after refused POSTs: %+v", keys)
	}
	// A POST without a session goes to the login page with a message.
	anon := e.client()
	if p := anon.post("/admin/keys", url.Values{"description": {"x"}}); p.status != http.StatusSeeOther ||
		p.location() != "/admin/login?next="+url.QueryEscape("/admin/keys") {
		t.Errorf("anonymous POST: %d to %q", p.status, p.location())
	}
	if p := anon.get("/admin/login"); !strings.Contains(p.body, "Your session has ended") {
		t.Errorf("no session message")
	}
}

// requesterJSON is the requester machine/pid of the tests: it started a minute
// before the env.
func (e *webEnv) requesterJSON(machine string, pid int) map[string]any {
	return map[string]any{"machineId": machine, "pid": pid, "startedAt": e.started.Format(time.RFC3339Nano)}
}

// v1 posts body to a /v1 route with key, as a client would, and decodes the
// 200 answer into out.
func (e *webEnv) v1(path, key string, body, out any) {
	e.t.Helper()
	b, _ := json.Marshal(body)
	req, err := http.NewRequest(http.MethodPost, e.url+path, bytes.NewReader(b))
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-API-Key", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		e.t.Fatalf("%s: %d %s", path, resp.StatusCode, raw)
	}
	if err := json.Unmarshal(raw, out); err != nil {
		e.t.Fatal(err)
	}
}

// alloc leases count node IDs with key through /v1 (docs/api.md) and returns them.
func (e *webEnv) alloc(key, machine string, pid, count int) []int {
	e.t.Helper()
	var out struct {
		Leases []struct {
			NodeID int `json:"nodeId"`
		} `json:"leases"`
	}
	e.v1("/v1/leases", key, map[string]any{"requester": e.requesterJSON(machine, pid), "count": count,
		"clientUtcNow": time.Now().UTC().Format(time.RFC3339Nano)}, &out)
	var ids []int
	for _, l := range out.Leases {
		ids = append(ids, l.NodeID)
	}
	return ids
}

// remove releases the leases of the requester through /v1, without mintedUpTo:
// its node IDs cool until the leases' expiry.
func (e *webEnv) remove(key, machine string, pid int) {
	e.t.Helper()
	var out struct{ Removed int }
	e.v1("/v1/leases/remove", key, map[string]any{"requester": e.requesterJSON(machine, pid)}, &out)
}

var secretRE = regexp.MustCompile(`<output id="new-secret"[^>]*>(idk_[A-Za-z0-9_-]+)</output>`)

func TestPagesKeysAndLeases(t *testing.T) {
	e := newWebEnv(t)
	c := e.client()
	c.login("admin")
	if p := c.get("/admin/keys"); !strings.Contains(p.body, "There is no API key yet") {
		t.Errorf("no empty state on the keys page")
	}
	if p := c.get("/admin/leases"); !strings.Contains(p.body, "No node ID is leased right now") {
		t.Errorf("no empty state on the leases page")
	}
	// A bad form keeps what was typed and says what is wrong.
	p := c.post("/admin/keys", url.Values{"description": {"billing"}, "maxNodes": {"many"}})
	checkPage(t, "bad create", p, http.StatusBadRequest)
	if !strings.Contains(p.body, `value="billing"`) || !strings.Contains(p.body, "role=\"alert\"") {
		t.Errorf("bad create: %s", p.body)
	}
	p = c.post("/admin/keys", url.Values{"description": {"billing"}, "maxNodes": {"4"}, "expiresAt": {"2099-01-31T12:00"}})
	if p.status != http.StatusSeeOther || !strings.HasSuffix(p.location(), "/created") {
		t.Fatalf("create: %d to %q: %s", p.status, p.location(), p.body)
	}
	created := p.location()
	p = c.get(created)
	checkPage(t, "create", p, http.StatusOK)
	if again := c.get(created); secretRE.MatchString(again.body) || !strings.Contains(again.body, "was shown once") {
		t.Errorf("the created page shows the secret again on a reload: %s", again.body)
	}
	m := secretRE.FindStringSubmatch(p.body)
	if m == nil || !strings.Contains(p.body, "it will not be shown again") {
		t.Fatalf("no secret in the created page: %s", p.body)
	}
	secret := m[1]
	keys, err := e.reg.Keys(context.Background())
	if err != nil || len(keys) != 1 || keys[0].Key.MaxNodes != 4 || keys[0].Key.CreatedBy != "user:admin" ||
		!keys[0].Key.ExpiresAt.Equal(time.Date(2099, 1, 31, 12, 0, 0, 0, time.UTC)) {
		t.Fatalf("keys %+v %v", keys, err)
	}
	id := keys[0].Key.ID
	nodes := e.alloc(secret, "host-a", 4242, 2)
	// The secret is in no page after its creation.
	for _, path := range []string{"/admin/keys", "/admin/keys/" + id, "/admin/leases", "/admin/leases/live", "/admin/audit"} {
		if p := c.get(path); strings.Contains(p.body, secret) || strings.Contains(p.body, secret[4:]) {
			t.Errorf("%s holds the secret", path)
		}
	}
	p = c.get("/admin/leases?key=" + id + "&status=leased")
	for _, n := range nodes {
		if !strings.Contains(p.body, `aria-label="Node `+itoa(n)+`"`) || !strings.Contains(p.body, `<a href="?node=`+itoa(n)+`"><title>`) {
			t.Errorf("node %d not in the list or the map", n)
		}
	}
	if !strings.Contains(p.body, "host-a") || !strings.Contains(p.body, `<dd id="count-leased">2</dd>`) {
		t.Errorf("leases page: %s", p.body)
	}
	if p := c.get("/admin/leases?status=grace"); !strings.Contains(p.body, "No lease matches the filter") {
		t.Errorf("grace filter shows leases")
	}
	if p := c.get("/admin/leases?requester=HOST-A"); strings.Count(p.body, `aria-label="Revoke the lease on node`) != 2 {
		t.Errorf("requester filter")
	}
	// The live parts alone: no layout.
	live := c.get("/admin/leases/live")
	if live.status != 200 || strings.Contains(live.body, "<html") || !strings.Contains(live.body, `id="live-pool"`) ||
		!strings.Contains(live.body, `id="live-list"`) {
		t.Errorf("live: %d %.300s", live.status, live.body)
	}
	// The map is gzipped for a browser that takes it.
	if p := c.get("/admin/leases/live", "Accept-Encoding", "gzip"); p.header.Get("Content-Encoding") != "gzip" || len(p.body) > 60_000 {
		t.Errorf("live gzipped: %q, %d bytes", p.header.Get("Content-Encoding"), len(p.body))
	} else {
		t.Logf("the live parts: %d bytes, %d gzipped", len(live.body), len(p.body))
	}
	// The confirm step changes nothing and says what will happen.
	ls, _ := e.reg.Leases(context.Background())
	l := ls[0]
	conf := c.get("/admin/leases/revoke?node=" + itoa(int(l.NodeID)) + "&token=" + itoa(int(l.FencingToken)))
	checkPage(t, "confirm", conf, http.StatusOK)
	until := l.ExpiresAt.Add(e.reg.Config().Grace).UTC().Format("2006-01-02 15:04:05Z")
	if !strings.Contains(conf.body, "will be quarantined until <time") || !strings.Contains(conf.body, until) ||
		!strings.Contains(conf.body, "the holder learns at its next Renew") {
		t.Errorf("confirm page: %s", conf.body)
	}
	if ls2, _ := e.reg.Leases(context.Background()); len(ls2) != 2 {
		t.Fatalf("the confirm page revoked: %d leases", len(ls2))
	}
	p = c.post("/admin/leases/revoke", url.Values{"node": {itoa(int(l.NodeID))}, "token": {itoa(int(l.FencingToken))}})
	if p.status != http.StatusSeeOther || p.location() != "/admin/leases?node="+itoa(int(l.NodeID)) {
		t.Fatalf("revoke: %d to %q: %s", p.status, p.location(), p.body)
	}
	p = c.get(p.location())
	if !strings.Contains(p.body, "was revoked: the node ID is quarantined until "+until) ||
		!strings.Contains(p.body, `<span class="badge quarantined">quarantined</span>`) {
		t.Errorf("after revoke: %s", p.body)
	}
	// The node's detail shows its state in the store: watermark, quarantine, token.
	for _, want := range []string{`<dt>Last fencing token</dt><dd class="mono">` + itoa(int(l.FencingToken)) + `</dd>`,
		`<dt>Quarantined until</dt><dd><time datetime="` + ts(l.ExpiresAt.Add(e.reg.Config().Grace)) + `"`,
		`<dt>Watermark</dt><dd><time datetime="` + ts(l.ExpiresAt) + `"`, `<dt>Restorable</dt><dd>no</dd>`} {
		if !strings.Contains(p.body, want) {
			t.Errorf("the node's detail lacks %s", want)
		}
	}
	// Revoking again: the lease is gone, said on an error page.
	p = c.post("/admin/leases/revoke", url.Values{"node": {itoa(int(l.NodeID))}, "token": {itoa(int(l.FencingToken))}})
	checkPage(t, "revoke twice", p, http.StatusNotFound)

	// Key: set the quota and the expiry (empty: never), then revoke.
	p = c.post("/admin/keys/"+id, url.Values{"expiresAt": {""}, "maxNodes": {"8"}})
	if p.status != http.StatusSeeOther {
		t.Fatalf("update: %d %s", p.status, p.body)
	}
	if k, _ := e.reg.Key(context.Background(), id); k.Key.MaxNodes != 8 || !k.Key.ExpiresAt.IsZero() {
		t.Errorf("after update: %+v", k.Key)
	}
	p = c.get("/admin/keys/" + id)
	if !strings.Contains(p.body, "were saved") || !strings.Contains(p.body, "Its leases are not revoked") {
		t.Errorf("key page: %s", p.body)
	}
	p = c.post("/admin/keys/"+id+"/revoke", nil)
	if p = c.get(p.location()); !strings.Contains(p.body, "was revoked: its 1 node ID stays held") ||
		!strings.Contains(p.body, `<span class="badge revoked">revoked</span>`) || len(postForms(p.body)) != 1 {
		t.Errorf("revoked key page: %s", p.body)
	}
}

func TestPagesAccountsAndAllowList(t *testing.T) {
	e := newWebEnv(t)
	c := e.client()
	c.login("admin")
	p := c.post("/admin/allowlist", url.Values{"prefix": {"10.1.0.0/16"}, "note": {"office VPN"}})
	if p = c.get(p.location()); !strings.Contains(p.body, "10.1.0.0/16 was added") || !strings.Contains(p.body, "office VPN") ||
		!strings.Contains(p.body, "10.9.0.0/16") || !strings.Contains(p.body, "Then allow every address") {
		t.Errorf("allow-list page: %s", p.body)
	}
	p = c.post("/admin/allowlist", url.Values{"prefix": {"not-an-ip"}, "note": {"x"}})
	checkPage(t, "bad prefix", p, http.StatusBadRequest)
	// The last entry goes only with the confirmation.
	checkPage(t, "remove last", c.post("/admin/allowlist/remove", url.Values{"prefix": {"10.1.0.0/16"}}), http.StatusConflict)
	p = c.post("/admin/allowlist/remove", url.Values{"prefix": {"10.1.0.0/16"}, "allowAll": {"true"}})
	if p = c.get(p.location()); !strings.Contains(p.body, "was removed") || !strings.Contains(p.body, "every address is allowed") {
		t.Errorf("after remove: %s", p.body)
	}

	p = c.post("/admin/users", url.Values{"name": {"Olivia"}, "role": {"operator"}, "password": {webAdminPW}})
	if p.status != http.StatusSeeOther || p.location() != "/admin/users/olivia" {
		t.Fatalf("add user: %d %q %s", p.status, p.location(), p.body)
	}
	p = c.post("/admin/users", url.Values{"name": {"bad name"}, "role": {"operator"}, "password": {webAdminPW}})
	checkPage(t, "bad user", p, http.StatusBadRequest)
	if strings.Contains(p.body, webAdminPW) {
		t.Error("the page repeats a password")
	}
	for _, a := range []struct {
		action string
		form   url.Values
	}{{"role", url.Values{"role": {"viewer"}}}, {"disable", nil}, {"enable", nil},
		{"password", url.Values{"password": {"another-password-01"}}}} {
		p = c.post("/admin/users/olivia/"+a.action, a.form)
		if p.status != http.StatusSeeOther {
			t.Errorf("%s: %d %s", a.action, p.status, p.body)
		}
	}
	u, _ := e.store.User(context.Background(), "olivia")
	if u.Role != account.RoleViewer || u.Disabled {
		t.Errorf("olivia: %+v", u)
	}
	olivia := e.client()
	if p := olivia.post("/admin/login", url.Values{"name": {"olivia"}, "password": {"another-password-01"}}); p.status != http.StatusSeeOther {
		t.Fatalf("olivia's login: %d", p.status)
	}
	// Her own password: the two must match, the current one must be right.
	p = olivia.post("/admin/profile/password", url.Values{"current": {"another-password-01"}, "password": {"third-password-0001"},
		"again": {"third-password-0002"}})
	checkPage(t, "mismatch", p, http.StatusBadRequest)
	p = olivia.post("/admin/profile/password", url.Values{"current": {"another-password-01"}, "password": {"third-password-0001"},
		"again": {"third-password-0001"}})
	if p.status != http.StatusSeeOther || p.location() != "/admin/login" {
		t.Fatalf("change password: %d %q", p.status, p.location())
	}
	if p := olivia.get("/admin/leases"); p.status != http.StatusSeeOther {
		t.Errorf("the session outlived the password change")
	}
	// The admin cannot change their own account here.
	if p := c.get("/admin/users/admin"); !strings.Contains(p.body, "This is your own account") || len(postForms(p.body)) != 1 {
		t.Errorf("own user page")
	}
	checkPage(t, "unknown user", c.get("/admin/users/nobody"), http.StatusNotFound)

	// The audit log shows the changes, newest first, filtered and paged.
	deadline := time.Now().Add(5 * time.Second)
	for {
		p = c.get("/admin/audit?action=user")
		if strings.Contains(p.body, `<td class="mono">user.create</td>`) || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.Contains(p.body, `<td class="mono">user.create</td>`) || strings.Contains(p.body, `<td class="mono">allowlist.add</td>`) {
		t.Errorf("audit filter: %s", p.body)
	}
	if p = c.get("/admin/audit?actor=user:nobody"); !strings.Contains(p.body, "No entry matches the filter") {
		t.Errorf("audit empty filter: %s", p.body)
	}
	for i := range 60 {
		if err := e.acct.Audit(context.Background(), audit.Entry{Actor: "system", Action: "test.fill", Target: itoa(i)}); err != nil {
			t.Fatal(err)
		}
	}
	p = c.get("/admin/audit")
	older := regexp.MustCompile(`<a href="(/admin/audit\?before=\d+)">Older entries</a>`).FindStringSubmatch(p.body)
	if older == nil || strings.Count(p.body, "<tr>") != 51 {
		t.Fatalf("audit paging: %d rows, older %v", strings.Count(p.body, "<tr>"), older)
	}
	if p = c.get(older[1]); !strings.Contains(p.body, "Newest entries") || !strings.Contains(p.body, "user.login") {
		t.Errorf("older page: %s", p.body)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
