package admin_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper/account"
	"github.com/idkeeper/idkeeper/admin"
	"github.com/idkeeper/idkeeper/audit"
	"github.com/idkeeper/idkeeper/discord"
	"github.com/idkeeper/idkeeper/discord/discordtest"
	"github.com/idkeeper/idkeeper/protocol"
)

// The caller's own Discord webhook through the API (webhook.go): set, shown
// masked, refused when invalid, cleared, and a test message through the fake
// Discord. The webhook's token is in no answer and no audit entry.

// tokenOf is the secret part of a webhook URL: its last path segment.
func tokenOf(webhook string) string { return webhook[strings.LastIndexByte(webhook, '/')+1:] }

// noToken fails the test when raw holds the token of webhook.
func noToken(t *testing.T, what string, raw []byte, webhook string) {
	t.Helper()
	if tok := tokenOf(webhook); strings.Contains(string(raw), tok) {
		t.Fatalf("%s holds the webhook's token %q: %s", what, tok, raw)
	}
}

// withDiscord sends the env's test messages to fd.
func withDiscord(fd *discordtest.Server) func(*setup) {
	return func(s *setup) { s.discord = &discord.Client{HTTP: fd.HTTPClient()} }
}

func TestWebhookSetShowClear(t *testing.T) {
	stores(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		e.user("vera", account.RoleViewer)
		vera := e.login("vera", userPW)
		hook := "https://discord.com/api/webhooks/112233445566778899/tok_vera-ABCDEFGHIJKLMNOPQRSTUVWXYZ_0123456789abcdef"
		masked := discord.Mask(hook)
		before, err := e.store.User(ctx, "vera")
		if err != nil {
			t.Fatal(err)
		}

		// Refused: not a Discord webhook URL, no url member, an unknown member, an API key.
		for body, field := range map[string]string{
			`{"url":"` + strings.Replace(hook, "https://", "http://", 1) + `"}`:                "url",
			`{"url":"` + strings.Replace(hook, "discord.com", "discord.example.com", 1) + `"}`: "url",
			`{"url":"` + hook + `?wait=true"}`:                                                 "url",
			`{}`:                                                                               "url",
			`{"url":"` + hook + `","channel":"x"}`:                                             "channel",
		} {
			r := e.do("POST", "/admin/api/me/webhook", body, "Cookie", vera).problem(t, protocol.CodeInvalidRequest)
			if r.str("field") != field {
				t.Errorf("%s: field %q, want %q: %s", body, r.str("field"), field, r.raw)
			}
			noToken(t, "a refusal", r.raw, hook)
		}
		r := e.do("POST", "/admin/api/me/webhook", `{"url":"http://discord.com/api/webhooks/1/abc"}`, "Cookie", vera)
		if !strings.Contains(r.str("detail"), "scheme must be https") {
			t.Errorf("the refusal does not say why: %s", r.raw)
		}
		e.do("POST", "/admin/api/me/webhook", `{"url":"`+hook+`"}`, "X-API-Key", adminKey).problem(t, protocol.CodeForbidden)
		// A cross-site request changes nothing.
		e.do("POST", "/admin/api/me/webhook", `{"url":"`+hook+`"}`, "Cookie", vera, "Sec-Fetch-Site", "cross-site").
			problem(t, protocol.CodeForbidden)
		if u, _ := e.store.User(ctx, "vera"); u.Webhook != "" {
			t.Fatalf("a refused request stored %q", u.Webhook)
		}

		// A viewer sets their own: the answer, /me and the admin's user list show it
		// masked; the store keeps it whole; the session stays.
		r = e.do("POST", "/admin/api/me/webhook", `{"url":" `+hook+` "}`, "Cookie", vera).ok(t)
		if r.str("webhook") != masked || !strings.HasSuffix(masked, "/112233445566778899/••••cdef") {
			t.Fatalf("set: %s, want webhook %q", r.raw, masked)
		}
		noToken(t, "the answer to set", r.raw, hook)
		u, err := e.store.User(ctx, "vera")
		if err != nil || u.Webhook != hook || u.Epoch != before.Epoch {
			t.Fatalf("stored %q epoch %d (was %d), %v; want the URL as given, the epoch kept", u.Webhook, u.Epoch, before.Epoch, err)
		}
		me := e.do("GET", "/admin/api/me", "", "Cookie", vera).ok(t)
		if me.str("webhook") != masked || me.str("name") != "vera" {
			t.Fatalf("me: %s", me.raw)
		}
		noToken(t, "/me", me.raw, hook)
		root := e.login("root", rootPW)
		for who, cookie := range map[string]string{"admin": root, "viewer": vera} {
			var list struct {
				Users []struct {
					Name    string  `json:"name"`
					Webhook *string `json:"webhook"`
				} `json:"users"`
			}
			r := e.do("GET", "/admin/api/users", "", "Cookie", cookie).ok(t)
			noToken(t, "the user list", r.raw, hook)
			r.decode(t, &list)
			for _, lu := range list.Users {
				switch {
				case who == "admin" && lu.Name == "vera" && (lu.Webhook == nil || *lu.Webhook != masked):
					t.Errorf("the admin's list: vera's webhook %v, want %q", lu.Webhook, masked)
				case (who == "viewer" || lu.Name != "vera") && lu.Webhook != nil:
					t.Errorf("%s's list: %s has the webhook %q", who, lu.Name, *lu.Webhook)
				}
			}
		}
		// The same URL again is no change.
		e.do("POST", "/admin/api/me/webhook", `{"url":"`+hook+`"}`, "Cookie", vera).ok(t)
		if u2, _ := e.store.User(ctx, "vera"); u2.Version != u.Version {
			t.Errorf("the same URL again wrote the record: version %d → %d", u.Version, u2.Version)
		}

		// Cleared with "" and with remove; removing none is no error.
		r = e.do("POST", "/admin/api/me/webhook", `{"url":""}`, "Cookie", vera).ok(t)
		if v, ok := r.body["webhook"]; !ok || v != nil {
			t.Fatalf("clear: %s, want webhook null", r.raw)
		}
		e.do("POST", "/admin/api/me/webhook", `{"url":"`+hook+`"}`, "Cookie", vera).ok(t)
		e.do("POST", "/admin/api/me/webhook/remove", "", "Cookie", vera).status1(t, http.StatusNoContent)
		e.do("POST", "/admin/api/me/webhook/remove", "", "Cookie", vera).status1(t, http.StatusNoContent)
		if me := e.do("GET", "/admin/api/me", "", "Cookie", vera).ok(t); me.body["webhook"] != nil {
			t.Fatalf("me after remove: %s", me.raw)
		}
		if u, _ := e.store.User(ctx, "vera"); u.Webhook != "" || u.Epoch != before.Epoch {
			t.Fatalf("after remove: %+v", u)
		}

		// The audit log: each change, the URL masked, never the token.
		var details []string
		for _, a := range e.auditAll("Cookie", root) {
			b, _ := json.Marshal(a)
			noToken(t, "the audit log", b, hook)
			if a.Action == audit.UserWebhook {
				if a.Actor != "user:vera" || a.Target != "user:vera" {
					t.Errorf("audit entry %+v", a)
				}
				details = append([]string{a.Detail}, details...)
			}
		}
		want := []string{"set " + masked, "cleared", "set " + masked, "cleared"}
		if strings.Join(details, "|") != strings.Join(want, "|") {
			t.Errorf("audit details %q, want %q", details, want)
		}
	})
}

func TestWebhookTestMessage(t *testing.T) {
	fd := discordtest.New(t)
	e := newEnv(t, withDiscord(fd))
	e.user("vera", account.RoleViewer)
	e.user("otto", account.RoleOperator)
	vera, otto := e.login("vera", userPW), e.login("otto", userPW)

	e.do("POST", "/admin/api/me/webhook/test", "", "Cookie", vera).problem(t, admin.CodeWebhookNotSet)
	hook := fd.Webhook("4242")
	e.do("POST", "/admin/api/me/webhook", `{"url":"`+hook+`"}`, "Cookie", vera).ok(t)

	var ans struct {
		Delivered bool `json:"delivered"`
		Discord   struct {
			Status   int    `json:"status"`
			Body     string `json:"body"`
			Attempts int    `json:"attempts"`
			Error    string `json:"error"`
		} `json:"discord"`
	}
	r := e.do("POST", "/admin/api/me/webhook/test", "", "Cookie", vera).ok(t)
	r.decode(t, &ans)
	noToken(t, "the test's answer", r.raw, hook)
	if !ans.Delivered || ans.Discord.Status != 200 || ans.Discord.Attempts != 1 || ans.Discord.Error != "" ||
		!strings.Contains(ans.Discord.Body, "IdKeeper test message") {
		t.Fatalf("test answer %s", r.raw)
	}
	calls := fd.CallsTo("4242")
	if len(calls) != 1 || !strings.Contains(calls[0].Message.Content, "IdKeeper test message") ||
		!strings.Contains(calls[0].Message.Content, "vera") {
		t.Fatalf("Discord got %+v", calls)
	}

	// Once per WebhookTestInterval per user; another user is not held back.
	r = e.do("POST", "/admin/api/me/webhook/test", "", "Cookie", vera).problem(t, admin.CodeWebhookTestRateLimited)
	if r.header.Get("Retry-After") != "10" {
		t.Errorf("Retry-After %q", r.header.Get("Retry-After"))
	}
	if n := len(fd.CallsTo("4242")); n != 1 {
		t.Fatalf("a throttled test reached Discord: %d calls", n)
	}
	ottoHook := fd.Webhook("777", discordtest.Reply{Status: http.StatusOK})
	e.do("POST", "/admin/api/me/webhook", `{"url":"`+ottoHook+`"}`, "Cookie", otto).ok(t)
	e.do("POST", "/admin/api/me/webhook/test", "", "Cookie", otto).ok(t)

	// A deleted webhook: Discord's 404 is the answer, as 502 WEBHOOK_TEST_FAILED.
	e.clk.Advance(admin.WebhookTestInterval)
	gone := "https://discord.com/api/webhooks/999/tok_999_abcdefghijklmnopqrstuvwxyz0123456789"
	e.do("POST", "/admin/api/me/webhook", `{"url":"`+gone+`"}`, "Cookie", vera).ok(t)
	r = e.do("POST", "/admin/api/me/webhook/test", "", "Cookie", vera).problem(t, admin.CodeWebhookTestFailed)
	noToken(t, "the failed test's answer", r.raw, gone)
	var failed struct {
		Discord struct {
			Status   int    `json:"status"`
			Body     string `json:"body"`
			Attempts int    `json:"attempts"`
			Error    string `json:"error"`
		} `json:"discord"`
	}
	r.decode(t, &failed)
	if failed.Discord.Status != 404 || !strings.Contains(failed.Discord.Body, "Unknown Webhook") || failed.Discord.Attempts != 1 ||
		!strings.Contains(failed.Discord.Error, "not found") || !strings.Contains(r.str("detail"), "Unknown Webhook") {
		t.Fatalf("failed test answer %s", r.raw)
	}

	// Every test is audited, the URL masked.
	var tests []string
	for _, a := range e.auditAll("X-API-Key", adminKey) {
		b, _ := json.Marshal(a)
		noToken(t, "the audit log", b, hook)
		noToken(t, "the audit log", b, gone)
		if a.Action == audit.WebhookTest {
			tests = append(tests, a.Actor+" "+a.Detail)
		}
	}
	if len(tests) != 3 || !strings.HasPrefix(tests[0], "user:vera test message to "+discord.Mask(gone)+": failed: ") ||
		tests[1] != "user:otto test message to "+discord.Mask(ottoHook)+": delivered" ||
		tests[2] != "user:vera test message to "+discord.Mask(hook)+": delivered" {
		t.Errorf("audited tests %q", tests)
	}

	// Without a sender the server says alerts are not configured.
	e2 := newEnv(t)
	e2.user("vera", account.RoleViewer)
	v2 := e2.login("vera", userPW)
	e2.do("POST", "/admin/api/me/webhook", `{"url":"`+hook+`"}`, "Cookie", v2).ok(t)
	e2.do("POST", "/admin/api/me/webhook/test", "", "Cookie", v2).problem(t, admin.CodeAlertsNotConfigured)
	if n := len(fd.CallsTo("4242")); n != 1 {
		t.Fatalf("%d calls", n)
	}
}

// The profile page's "Discord alerts" over plain HTTP: set (the URL never shown
// again, not even in the form), test (Discord's answer on the page), a deleted
// webhook's 404, remove; cross-site posts refused; the user page masked for
// admins only.
func TestWebhookPages(t *testing.T) {
	e := newWebEnv(t)
	e.addUser("vera", account.RoleViewer)
	e.addUser("otto", account.RoleViewer)
	c := e.client()
	c.login("vera")

	p := c.get("/admin/profile")
	checkPage(t, "profile", p, http.StatusOK)
	for _, want := range []string{"Discord alerts", `<input type="url" id="hook-url" name="url" required`, "none: you get no alerts",
		`action="/admin/profile/webhook"`} {
		if !strings.Contains(p.body, want) {
			t.Errorf("profile page without %q", want)
		}
	}
	if strings.Contains(p.body, "Send test message") {
		t.Error("a test button without a webhook")
	}

	hook := e.discord.Webhook("5150")
	masked := discord.Mask(hook)
	// Cross-site: refused, nothing stored.
	p = c.post("/admin/profile/webhook", url.Values{"url": {hook}}, "Sec-Fetch-Site", "cross-site")
	if p.status != http.StatusForbidden {
		t.Fatalf("cross-site set: %d", p.status)
	}
	// Invalid: the error, and the URL typed is not repeated.
	bad := strings.Replace(hook, "https://", "http://", 1)
	p = c.post("/admin/profile/webhook", url.Values{"url": {bad}})
	checkPage(t, "invalid webhook", p, http.StatusBadRequest)
	noToken(t, "the page after an invalid URL", []byte(p.body), hook)
	if !strings.Contains(p.body, "scheme must be https") {
		t.Errorf("the page does not say why: %s", p.body)
	}
	if u, _ := e.store.User(context.Background(), "vera"); u.Webhook != "" {
		t.Fatalf("stored %q", u.Webhook)
	}

	p = c.post("/admin/profile/webhook", url.Values{"url": {hook}})
	if p.status != http.StatusSeeOther || p.location() != "/admin/profile" {
		t.Fatalf("set: %d %q %s", p.status, p.location(), p.body)
	}
	p = c.get("/admin/profile")
	noToken(t, "the profile page", []byte(p.body), hook)
	if !strings.Contains(p.body, "Your Discord webhook was saved: "+masked) || !strings.Contains(p.body, "<code>"+masked+"</code>") ||
		!strings.Contains(p.body, "Send test message") || strings.Contains(p.body, `value="https`) {
		t.Fatalf("profile after set: %s", p.body)
	}

	// The test message: Discord's answer on the page, and the fake got it.
	p = c.post("/admin/profile/webhook/test", nil)
	checkPage(t, "test message", p, http.StatusOK)
	noToken(t, "the test's page", []byte(p.body), hook)
	for _, want := range []string{"Discord took the test message", "Discord's answer to the test message",
		`<dd id="answer-status">200 OK</dd>`, "IdKeeper test message"} {
		if !strings.Contains(p.body, want) {
			t.Errorf("test page without %q: %s", want, p.body)
		}
	}
	if calls := e.discord.CallsTo("5150"); len(calls) != 1 || !strings.Contains(calls[0].Message.Content, "vera") {
		t.Fatalf("Discord got %+v", calls)
	}
	// Again at once: throttled, said so.
	p = c.post("/admin/profile/webhook/test", nil)
	checkPage(t, "throttled test", p, http.StatusTooManyRequests)
	if !strings.Contains(p.body, "one test message per 10s") {
		t.Errorf("throttled page: %s", p.body)
	}

	// An admin sees the masked webhook on vera's page; another viewer does not.
	boss := e.client()
	boss.login("admin")
	if p := boss.get("/admin/users/vera"); !strings.Contains(p.body, "<code>"+masked+"</code>") {
		t.Errorf("the admin's view of vera lacks her webhook")
	} else {
		noToken(t, "the user page", []byte(p.body), hook)
	}
	otto := e.client()
	otto.login("otto")
	if p := otto.get("/admin/users/vera"); strings.Contains(p.body, "Discord alerts") || strings.Contains(p.body, "5150") {
		t.Errorf("a viewer sees another user's webhook")
	}

	// A deleted webhook: Discord's 404 is shown.
	gone := "https://discord.com/api/webhooks/404404/tok_404404_abcdefghijklmnopqrstuvwxyz0123456789"
	otto.post("/admin/profile/webhook", url.Values{"url": {gone}})
	p = otto.post("/admin/profile/webhook/test", nil)
	checkPage(t, "test of a deleted webhook", p, http.StatusOK)
	noToken(t, "the failed test's page", []byte(p.body), gone)
	for _, want := range []string{`role="alert">Discord did not take the test message`, `<dd id="answer-status">404 Not Found</dd>`,
		"Unknown Webhook"} {
		if !strings.Contains(p.body, want) {
			t.Errorf("failed test page without %q: %s", want, p.body)
		}
	}

	// Remove.
	p = c.post("/admin/profile/webhook/remove", nil)
	if p.status != http.StatusSeeOther {
		t.Fatalf("remove: %d %s", p.status, p.body)
	}
	if p = c.get("/admin/profile"); !strings.Contains(p.body, "Your Discord webhook was removed") ||
		!strings.Contains(p.body, "none: you get no alerts") {
		t.Errorf("after remove: %s", p.body)
	}
	if u, _ := e.store.User(context.Background(), "vera"); u.Webhook != "" {
		t.Fatalf("after remove the store holds %q", u.Webhook)
	}
	// The audit page names the changes, masked.
	deadline := time.Now().Add(5 * time.Second)
	for {
		p = boss.get("/admin/audit?action=" + audit.UserWebhook)
		if strings.Contains(p.body, "cleared") || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.Contains(p.body, "set "+masked) || !strings.Contains(p.body, "cleared") {
		t.Errorf("audit page: %s", p.body)
	}
	noToken(t, "the audit page", []byte(p.body), hook)
}
