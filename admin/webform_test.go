package admin_test

import (
	"bytes"
	"context"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper/account"
	"github.com/idkeeper/idkeeper/apikey"
	"github.com/idkeeper/idkeeper/audit"
	"github.com/idkeeper/idkeeper/backup"
)

// The one-time form tokens (webform.go): every state-changing form, sent twice
// with one token, makes its change once.

// auditCount counts the audit entries of action.
func (e *webEnv) auditCount(action string) int {
	e.t.Helper()
	n := 0
	for from := uint64(0); ; {
		es, err := e.store.AuditEntries(context.Background(), from, 1000)
		if err != nil {
			e.t.Fatal(err)
		}
		for _, a := range es {
			if a.Action == action {
				n++
			}
			from = a.Seq + 1
		}
		if len(es) < 1000 {
			return n
		}
	}
}

// flashOf loads the page p redirects to and returns its flash message.
func (c *webClient) flashOf(p page) string {
	c.e.t.Helper()
	body := c.get(p.location()).body
	i := strings.Index(body, `class="flash"`)
	if i < 0 {
		return ""
	}
	body = body[i:]
	j := strings.Index(body, "</")
	return body[:j]
}

func TestFormTokenOnce(t *testing.T) {
	e := newWebEnv(t)
	ctx := context.Background()
	c := e.client()
	c.login("admin")
	newKey := func(desc string) (id, secret string) {
		secret, k, err := apikey.NewAdmin(e.reg).Create(ctx, apikey.Spec{Description: desc})
		if err != nil {
			t.Fatal(err)
		}
		return k.ID, secret
	}
	for _, name := range []string{"u-role", "u-off", "u-on", "u-pw"} {
		e.addUser(name, account.RoleViewer)
	}
	hook := e.discord.Webhook("424242")
	type tc struct {
		name, path string
		setup      func() url.Values // the form, without its token
		action     string            // the audit action of the change; "" to count with count
		count      func() int        // the changes made, when action is ""
	}
	cases := []tc{
		{name: "create key", path: "/admin/keys", action: audit.KeyCreate,
			setup: func() url.Values { return url.Values{"description": {"twice"}} }},
		{name: "update key", action: audit.KeyUpdate, setup: func() url.Values {
			id, _ := newKey("to update")
			return url.Values{"maxNodes": {"3"}, "id": {id}}
		}},
		{name: "revoke key", action: audit.KeyRevoke, setup: func() url.Values {
			id, _ := newKey("to revoke")
			return url.Values{"id": {id}}
		}},
		{name: "add allow-list entry", path: "/admin/allowlist", action: audit.AllowAdd,
			setup: func() url.Values { return url.Values{"prefix": {"10.1.0.0/16"}, "note": {"twice"}} }},
		{name: "remove allow-list entry", path: "/admin/allowlist/remove", action: audit.AllowRemove,
			setup: func() url.Values { return url.Values{"prefix": {"10.1.0.0/16"}, "allowAll": {"true"}} }},
		{name: "create user", path: "/admin/users", action: audit.UserCreate,
			setup: func() url.Values { return url.Values{"name": {"twice"}, "role": {"viewer"}, "password": {webAdminPW}} }},
		{name: "user role", path: "/admin/users/u-role/role", action: audit.UserUpdate,
			setup: func() url.Values { return url.Values{"role": {"operator"}} }},
		{name: "disable user", path: "/admin/users/u-off/disable", action: audit.UserUpdate,
			setup: func() url.Values { return url.Values{} }},
		{name: "enable user", path: "/admin/users/u-on/enable", action: audit.UserUpdate, setup: func() url.Values {
			if p := c.post("/admin/users/u-on/disable", url.Values{}); p.status != http.StatusSeeOther {
				t.Fatalf("disable u-on: %d", p.status)
			}
			return url.Values{}
		}},
		{name: "reset password", path: "/admin/users/u-pw/password", action: audit.PasswordChange,
			setup: func() url.Values { return url.Values{"password": {"another-password-0123"}} }},
		{name: "set webhook", path: "/admin/profile/webhook", action: audit.UserWebhook,
			setup: func() url.Values { return url.Values{"url": {hook}} }},
		{name: "remove webhook", path: "/admin/profile/webhook/remove", action: audit.UserWebhook,
			setup: func() url.Values { return url.Values{} }},
		{name: "revoke lease", path: "/admin/leases/revoke", action: audit.LeaseRevoke, setup: func() url.Values {
			_, secret := newKey("leases")
			e.alloc(secret, "host-twice", 77, 1)
			ls, err := e.reg.Leases(ctx)
			if err != nil || len(ls) != 1 {
				t.Fatalf("leases %v %v", ls, err)
			}
			return url.Values{"node": {itoa(int(ls[0].NodeID))}, "token": {itoa(int(ls[0].FencingToken))}}
		}},
		{name: "backup schedule", path: "/admin/backups/schedule", action: audit.BackupSchedule,
			setup: func() url.Values {
				cur, err := e.store.BackupSchedule(ctx)
				if err != nil {
					t.Fatal(err)
				}
				return url.Values{"schedule": {"17 4 * * *"}, "version": {itoa(int(cur.Version))}}
			}},
		{name: "back up now", path: "/admin/backups", action: backup.AuditCreate,
			setup: func() url.Values { return url.Values{} }},
		{name: "delete backup", path: "/admin/backups/delete", action: backup.AuditDelete, setup: func() url.Values {
			es, err := e.backups.Folder().List()
			if err != nil || len(es) != 1 {
				t.Fatalf("backups %v %v", es, err)
			}
			return url.Values{"name": {es[0].Name}}
		}},
	}
	for _, k := range cases {
		form := k.setup()
		path := k.path
		if id := form.Get("id"); id != "" {
			path = "/admin/keys/" + id
			if k.action == audit.KeyRevoke {
				path += "/revoke"
			}
			form.Del("id")
		}
		before := e.auditCount(k.action)
		form.Set("formToken", c.formToken())
		first := c.postRaw(path, form)
		if first.status != http.StatusSeeOther {
			t.Fatalf("%s: the first post answered %d: %.400s", k.name, first.status, first.body)
		}
		if msg := c.flashOf(first); strings.Contains(msg, "sent twice") {
			t.Errorf("%s: the first post's message %q", k.name, msg)
		}
		second := c.postRaw(path, form)
		if second.status != http.StatusSeeOther || second.location() != first.location() {
			t.Errorf("%s: the second post answered %d to %q, the first %q", k.name, second.status, second.location(), first.location())
		}
		if msg := c.flashOf(second); !strings.Contains(msg, "sent twice: the change was made once") {
			t.Errorf("%s: the second post's message %q", k.name, msg)
		}
		if n := e.auditCount(k.action) - before; n != 1 {
			t.Errorf("%s: %d changes audited, want 1", k.name, n)
		}
	}
	if ks, _ := e.reg.Keys(ctx); len(ks) != 4 { // twice, to update, to revoke, leases
		t.Errorf("%d keys, want 4", len(ks))
	}

	// The same token with other values: refused, nothing done.
	tok := c.formToken()
	if p := c.postRaw("/admin/allowlist", url.Values{"formToken": {tok}, "prefix": {"10.7.0.0/16"}, "note": {"n"}}); p.status != http.StatusSeeOther {
		t.Fatalf("add 10.7: %d %s", p.status, p.body)
	}
	p := c.postRaw("/admin/allowlist", url.Values{"formToken": {tok}, "prefix": {"10.8.0.0/16"}, "note": {"n"}})
	checkPage(t, "token reused with other values", p, http.StatusConflict)
	if !strings.Contains(p.body, "Reload the page to send new values") {
		t.Errorf("reused token page: %s", p.body)
	}
	if es, _ := e.store.AllowEntries(ctx); len(es) != 1 || es[0].Prefix.String() != "10.7.0.0/16" {
		t.Errorf("allow-list %v", es)
	}

	// No token, a forged one, another session's: refused, nothing done.
	other := e.client()
	other.login("admin")
	for what, tok := range map[string]string{"none": "", "forged": strings.Repeat("a", 32) + "." + strings.Repeat("b", 22),
		"another session's": other.formToken()} {
		p := c.postRaw("/admin/users", url.Values{"formToken": {tok}, "name": {"nobody"}, "role": {"viewer"}, "password": {webAdminPW}})
		checkPage(t, "token "+what, p, http.StatusBadRequest)
		if !strings.Contains(p.body, "reload the page") {
			t.Errorf("token %s: %s", what, p.body)
		}
	}
	if _, err := e.store.User(ctx, "nobody"); err == nil {
		t.Error("a form without a valid token made a user")
	}

	// A refused form leaves its token usable: the corrected form goes through.
	tok = c.formToken()
	p = c.postRaw("/admin/keys", url.Values{"formToken": {tok}, "description": {"fixed"}, "maxNodes": {"many"}})
	checkPage(t, "bad key form", p, http.StatusBadRequest)
	if p = c.postRaw("/admin/keys", url.Values{"formToken": {tok}, "description": {"fixed"}, "maxNodes": {"many"}}); p.status != http.StatusBadRequest {
		t.Errorf("the bad form again: %d", p.status)
	}

	// The own password: the change ends the session, so the second post is sent to the login page.
	before := e.auditCount(audit.PasswordChange)
	form := url.Values{"formToken": {c.formToken()}, "current": {webAdminPW}, "password": {"a-new-password-0123"}, "again": {"a-new-password-0123"}}
	if p := c.postRaw("/admin/profile/password", form); p.status != http.StatusSeeOther || p.location() != "/admin/login" {
		t.Fatalf("password: %d %q", p.status, p.location())
	}
	if p := c.postRaw("/admin/profile/password", form); p.status != http.StatusSeeOther || !strings.HasPrefix(p.location(), "/admin/login") {
		t.Errorf("password again: %d %q", p.status, p.location())
	}
	if n := e.auditCount(audit.PasswordChange) - before; n != 1 {
		t.Errorf("%d password changes", n)
	}
}

// TestFormTokenConcurrent sends one key create's form ten times at once: one
// key, and every answer the same redirect.
func TestFormTokenConcurrent(t *testing.T) {
	e := newWebEnv(t)
	c := e.client()
	c.login("admin")
	form := url.Values{"formToken": {c.formToken()}, "description": {"at once"}}
	var wg sync.WaitGroup
	got := make([]page, 10)
	for i := range got {
		wg.Go(func() { got[i] = c.postRaw("/admin/keys", form) })
	}
	wg.Wait()
	for i, p := range got {
		if p.status != http.StatusSeeOther || p.location() != got[0].location() {
			t.Errorf("post %d: %d to %q, post 0 to %q", i, p.status, p.location(), got[0].location())
		}
	}
	if ks, _ := e.reg.Keys(context.Background()); len(ks) != 1 {
		t.Fatalf("%d keys", len(ks))
	}
	// The secret is on the first load of the created page only.
	p := c.get(got[0].location())
	if !secretRE.MatchString(p.body) {
		t.Errorf("no secret on the created page: %s", p.body)
	}
	if p := c.get(got[0].location()); secretRE.MatchString(p.body) {
		t.Error("the secret again")
	}
}

// TestUnknownPageIsHTML: a page path without a route is a 404 page in the
// layout; an API path stays problem+json.
func TestUnknownPageIsHTML(t *testing.T) {
	e := newWebEnv(t)
	anon := e.client()
	p := anon.get("/admin/nonexistent")
	checkPage(t, "unknown page, not logged in", p, http.StatusNotFound)
	if !strings.Contains(p.body, "There is no page /admin/nonexistent") || strings.Contains(p.body, "Log out") {
		t.Errorf("unknown page: %s", p.body)
	}
	c := e.client()
	c.login("admin")
	p = c.get("/admin/nonexistent/deeper?x=1")
	checkPage(t, "unknown page, logged in", p, http.StatusNotFound)
	if !strings.Contains(p.body, "Log out") || !strings.Contains(p.body, `href="/admin/leases"`) {
		t.Errorf("the 404 page lacks the layout's navigation: %s", p.body)
	}
	if p := c.get("/admin/api"); p.status != http.StatusNotFound || !strings.HasPrefix(p.header.Get("Content-Type"), "application/problem+json") {
		t.Errorf("/admin/api: %d %q", p.status, p.header.Get("Content-Type"))
	}
	p = c.get("/admin/api/nonexistent")
	if p.status != http.StatusNotFound || !strings.HasPrefix(p.header.Get("Content-Type"), "application/problem+json") ||
		!strings.Contains(p.body, `"code":"NOT_FOUND"`) {
		t.Errorf("unknown API path: %d %q %s", p.status, p.header.Get("Content-Type"), p.body)
	}
}

// TestFormTokenRestoreConfirm: the restore's confirmation form carries a token
// and is refused without it; sent twice, the restore is made once (the second
// post finds the session the restore ended, and is sent to the login page).
func TestFormTokenRestoreConfirm(t *testing.T) {
	e := newWebEnv(t)
	ctx := context.Background()
	var file bytes.Buffer
	if _, err := backup.Export(ctx, e.store, &file, backup.Source{Store: "bolt", TakenAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	c := e.client()
	c.login("admin")
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	fw, err := mw.CreateFormFile("file", "idkeeper-1-20260301T100000Z.idkbackup")
	if err != nil {
		t.Fatal(err)
	}
	_, _ = fw.Write(file.Bytes())
	_ = mw.Close()
	req, _ := http.NewRequest(http.MethodPost, e.url+"/admin/restore", &body)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	resp, err := c.c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("preview: %d %s", resp.StatusCode, raw)
	}
	field := func(name string) string {
		m := regexp.MustCompile(`name="` + name + `" value="([^"]+)"`).FindSubmatch(raw)
		if m == nil {
			t.Fatalf("the preview page has no %s: %s", name, raw)
		}
		return string(m[1])
	}
	form := url.Values{"preview": {field("preview")}, "sha256": {field("sha256")}, "password": {webAdminPW}}
	checkPage(t, "confirm without a token", c.postRaw("/admin/restore/confirm", form), http.StatusBadRequest)
	form.Set("formToken", field("formToken"))
	before := e.auditCount(audit.BackupRestore)
	if p := c.postRaw("/admin/restore/confirm", form); p.status != http.StatusSeeOther || p.location() != "/admin/login" {
		t.Fatalf("confirm: %d %q %.300s", p.status, p.location(), p.body)
	}
	if p := c.postRaw("/admin/restore/confirm", form); p.status != http.StatusSeeOther || !strings.HasPrefix(p.location(), "/admin/login") {
		t.Errorf("confirm again: %d %q", p.status, p.location())
	}
	if n := e.auditCount(audit.BackupRestore) - before; n != 1 {
		t.Errorf("%d restores audited", n)
	}
}
