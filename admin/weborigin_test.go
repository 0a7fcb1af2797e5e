package admin_test

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper/account"
	"github.com/idkeeper/idkeeper/apikey"
	"github.com/idkeeper/idkeeper/internal/wire"
)

// The "Find an ID" page (issue #16, weborigin.go): the search box that answers
// what GET /admin/api/ids/{id}/origin answers.

// originLease is a lease of the origin tests, made through /v1 with the
// client's host and labels, and an ID composed in its window.
type originLease struct {
	keyID, secret string
	machine       string
	pid           int
	node          int64
	token         uint64
	mintAt        time.Time
	seq           int64
	id            int64
}

// leaseForOrigin creates an API key, leases one node ID with it through POST
// /v1/leases as requester machine/pid reporting host and labels, and composes
// an ID of that node ID at the current millisecond (inside the new lease's
// window) with the registry's layout.
func (e *webEnv) leaseForOrigin(machine string, pid int, host string, labels map[string]string) originLease {
	e.t.Helper()
	secret, k, err := apikey.NewAdmin(e.reg).Create(context.Background(), apikey.Spec{Description: "orders service", CreatedBy: "test"})
	if err != nil {
		e.t.Fatal(err)
	}
	var grant wire.AllocResponse
	e.v1("/v1/leases", secret, map[string]any{"requester": e.requesterJSON(machine, pid), "count": 1,
		"clientUtcNow": wire.FormatTime(time.Now()), "client": map[string]any{"host": host, "labels": labels}}, &grant)
	if len(grant.Leases) != 1 || grant.Leases[0].NodeID == nil || grant.Leases[0].FencingToken == nil {
		e.t.Fatalf("alloc: %+v", grant)
	}
	l := originLease{keyID: k.ID, secret: secret, machine: machine, pid: pid, node: *grant.Leases[0].NodeID,
		token: *grant.Leases[0].FencingToken, mintAt: time.Now().UTC().Truncate(time.Millisecond), seq: 17}
	layout := e.reg.Layout()
	ts, err := layout.Timestamp(l.mintAt)
	if err != nil {
		e.t.Fatal(err)
	}
	if l.id, err = layout.Compose(ts, l.node, l.seq); err != nil {
		e.t.Fatal(err)
	}
	return l
}

// originURL is the page's answer for the ID typed as s.
func originURL(s string) string { return "/admin/ids?id=" + url.QueryEscape(s) }

// msTime is t as the page shows it.
func msTime(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05.000Z") }

// TestOriginPage renders the page over HTTP: it needs a login (a viewer
// suffices) and is in every page's navigation; an ID of a lease shows the ID
// decoded and the process that minted it (requester, host and labels, key with
// a link to its page, token, window, held), the same for the quoted form; after
// the holder releases it with mintedUpTo it shows the end; an ID nobody's lease
// held says so with the registry's note; a bad ID is a 400 with the error next
// to the box and nothing else.
func TestOriginPage(t *testing.T) {
	e := newWebEnv(t)
	e.addUser("vera", account.RoleViewer)
	l := e.leaseForOrigin("orders-7f9c", 4242, "web-7.example", map[string]string{"service": "orders", "version": "1.4.2"})
	ids := strconv.FormatInt(l.id, 10)

	if p := e.client().get(originURL(ids)); p.status != http.StatusSeeOther ||
		p.location() != "/admin/login?next="+url.QueryEscape(originURL(ids)) {
		t.Fatalf("not logged in: %d to %q", p.status, p.location())
	}
	c := e.client()
	c.login("vera")

	// The form alone, current in the navigation; the other pages link it.
	p := c.get("/admin/ids")
	checkPage(t, "form", p, http.StatusOK)
	for _, want := range []string{`<a href="/admin/ids" aria-current="page">Find an ID</a>`, `role="search"`,
		`<label for="find-id">ID</label>`, `inputmode="numeric"`, `name="id"`, `aria-describedby="find-id-hint"`} {
		if !strings.Contains(p.body, want) {
			t.Errorf("the form lacks %s", want)
		}
	}
	if strings.Contains(p.body, `id="result-h"`) || strings.Contains(p.body, "aria-invalid") {
		t.Errorf("the empty form shows a result or an error")
	}
	for _, path := range []string{"/admin/leases", "/admin/keys", "/admin/store", "/admin/profile"} {
		if p := c.get(path); !strings.Contains(p.body, `<li><a href="/admin/ids">Find an ID</a></li>`) {
			t.Errorf("%s: no link to the page in the navigation", path)
		}
	}

	// An ID of the lease, in decimal and in the quoted form.
	for _, typed := range []string{ids, `"` + ids + `"`, "  " + ids + "\n"} {
		p = c.get(originURL(typed))
		checkPage(t, "result "+typed, p, http.StatusOK)
		for _, want := range []string{
			"<title>ID " + ids + " · IdKeeper admin</title>",
			`<h2 id="result-h">ID <span class="mono">` + ids + `</span></h2>`,
			`<dd id="decoded-time"><time datetime="` + wire.FormatTime(l.mintAt) + `">` + msTime(l.mintAt) + `</time>`,
			`<dd id="decoded-node"><a href="/admin/leases?node=` + itoa(int(l.node)) + `"`,
			`<dd id="decoded-seq">17</dd>`,
			`machine <span class="mono">orders-7f9c</span>, PID 4242`,
			"process started " + `<time datetime="` + wire.FormatTime(e.started) + `"`,
			`<dt>Host</dt><dd><span class="mono">web-7.example</span></dd>`,
			`<li class="mono">service=orders</li><li class="mono">version=1.4.2</li>`,
			`<a class="mono" href="/admin/keys/` + l.keyID + `">` + l.keyID + `</a><br><span class="muted">orders service</span>`,
			`<dt>Fencing token</dt><dd class="mono">` + strconv.FormatUint(l.token, 10) + `</dd>`,
			`<span class="badge leased">held</span> the lease has not ended`,
			"open (from the layout's epoch)",
			`<a href="/admin/api/ids/` + ids + `/origin">`,
		} {
			if !strings.Contains(p.body, want) {
				t.Errorf("%q: the answer lacks %s", typed, want)
			}
		}
		if strings.Contains(p.body, `id="no-lease"`) || strings.Contains(p.body, `id="contested"`) || strings.Contains(p.body, "aria-invalid") {
			t.Errorf("%q: the answer says no lease, contested or invalid", typed)
		}
		if !strings.Contains(p.body, `value="`+ids+`"`) && !strings.Contains(p.body, `value="&#34;`+ids+`&#34;"`) {
			t.Errorf("%q: the box does not show the ID again", typed)
		}
	}

	// A millisecond of another node ID nobody holds: no lease, and why.
	layout := e.reg.Layout()
	ts, _ := layout.Timestamp(l.mintAt)
	other, _ := layout.Compose(ts, (l.node+1)%int64(layout.Nodes()), 0)
	p = c.get(originURL(strconv.FormatInt(other, 10)))
	checkPage(t, "no lease", p, http.StatusOK)
	if !strings.Contains(p.body, `<div class="empty" id="no-lease"><p><strong>No lease known.</strong> No grant this store remembers held node ID `+
		itoa(int((l.node+1)%int64(layout.Nodes())))) || strings.Contains(p.body, `class="panel lease"`) {
		t.Errorf("no lease: %s", p.body)
	}

	// The holder releases the lease, attesting what it minted: the answer shows
	// the end and the attested time; a millisecond later is nobody's.
	var removed struct{ Removed int }
	e.v1("/v1/leases/remove", l.secret, map[string]any{"requester": e.requesterJSON(l.machine, l.pid),
		"mintedUpTo": wire.FormatTime(l.mintAt)}, &removed)
	p = c.get(originURL(ids))
	checkPage(t, "removed", p, http.StatusOK)
	for _, want := range []string{`<span class="badge none">removed</span> at <time`, ": its holder released it; it said it minted up to <time datetime=\"" +
		wire.FormatTime(l.mintAt) + `">` + msTime(l.mintAt) + "</time>", "–<br><time datetime=\"" + wire.FormatTime(l.mintAt) + `"`} {
		if !strings.Contains(p.body, want) {
			t.Errorf("after the remove the answer lacks %s", want)
		}
	}
	later, _ := layout.Compose(ts+1, l.node, 0)
	if p := c.get(originURL(strconv.FormatInt(later, 10))); !strings.Contains(p.body, `id="no-lease"`) {
		t.Errorf("a millisecond after mintedUpTo: %s", p.body)
	}

	// Bad IDs: 400, the error next to the box, nothing else.
	for typed, says := range map[string]string{
		"abc":                 "&#39;a&#39; is not a decimal digit",
		"-1":                  "a sign is not allowed",
		"9223372036854775808": "larger than 9223372036854775807",
		`"12`:                 "unmatched double quote",
		"":                    "empty",
		"<b>12</b>":           "is not a decimal digit",
	} {
		p := c.get(originURL(typed))
		checkPage(t, "bad "+typed, p, http.StatusBadRequest)
		for _, want := range []string{`aria-invalid="true"`, `aria-describedby="find-id-hint find-id-error"`,
			`<span class="field-error" id="find-id-error">Not an ID: `, says} {
			if !strings.Contains(p.body, want) {
				t.Errorf("bad %q: the page lacks %s", typed, want)
			}
		}
		if strings.Contains(p.body, `id="result-h"`) || strings.Contains(p.body, "<b>12") {
			t.Errorf("bad %q: a result, or the input unescaped", typed)
		}
	}
}

// TestOriginBrowser drives the page in Chromium as a viewer: a lease made
// through /v1 with the client's host and labels, its ID typed into the search
// box reached from the navigation, the answer naming the requester, host,
// labels and token; then a bad ID shows its error at the box. Every state is
// checked with axe-core and photographed at desktop and phone width.
func TestOriginBrowser(t *testing.T) {
	e := newWebEnv(t)
	e.addUser("vera", account.RoleViewer)
	l := e.leaseForOrigin("orders-7f9c", 4242, "web-7.example", map[string]string{"service": "orders", "version": "1.4.2"})
	ids := strconv.FormatInt(l.id, 10)
	b := newBrowser(t, e.url)

	b.open("/admin/ids")
	if p := b.path(); p != "/admin/login?next=%2Fadmin%2Fids" {
		t.Fatalf("not logged in, /admin/ids shows %s", p)
	}
	b.fill("#login-name", "vera")
	b.fill("#login-password", webAdminPW)
	if st := b.submit(`form[action="/admin/login"] button[type=submit]`); st != http.StatusOK {
		t.Fatalf("login answered %d", st)
	}
	if p := b.path(); p != "/admin/ids" {
		t.Fatalf("after the login the browser is at %s, want /admin/ids", p)
	}
	b.check("origin-empty")

	// From the navigation of another page, as a user finds it.
	b.open("/admin/leases")
	if st := b.submit(`nav a[href="/admin/ids"]`); st != http.StatusOK {
		t.Fatalf("the navigation's link answered %d", st)
	}
	b.fill("#find-id", ids)
	if st := b.submit(`form[role="search"] button[type=submit]`); st != http.StatusOK {
		t.Fatalf("the search answered %d", st)
	}
	if p := b.path(); p != "/admin/ids?id="+ids {
		t.Errorf("the search is at %s", p)
	}
	if h := b.text("#result-h"); h != "ID "+ids {
		t.Errorf("result heading %q", h)
	}
	main := b.text("main")
	for _, want := range []string{"orders-7f9c", "PID 4242", "web-7.example", "service=orders", "version=1.4.2",
		"fencing token " + strconv.FormatUint(l.token, 10), l.keyID, "held", msTime(l.mintAt)} {
		if !strings.Contains(main, want) {
			t.Errorf("the answer lacks %q: %s", want, main)
		}
	}
	if got := b.text("#decoded-seq"); got != "17" {
		t.Errorf("sequence %q", got)
	}
	b.check("origin")

	// A bad ID: the error at the box, which says it is invalid, and no answer.
	b.fill("#find-id", "12a45")
	if st := b.submit(`form[role="search"] button[type=submit]`); st != http.StatusBadRequest {
		t.Errorf("a bad ID answered %d, want 400", st)
	}
	if got := eval[string](b, `document.getElementById("find-id").getAttribute("aria-invalid") + "|" +
		document.getElementById("find-id").getAttribute("aria-describedby") + "|" + document.getElementById("find-id").value`); got != "true|find-id-hint find-id-error|12a45" {
		t.Errorf("the box after a bad ID: %q", got)
	}
	if msg := b.text("#find-id-error"); !strings.Contains(msg, `'a' is not a decimal digit`) {
		t.Errorf("the error says %q", msg)
	}
	if n := eval[int](b, `document.querySelectorAll("#result-h, .lease, #no-lease").length`); n != 0 {
		t.Errorf("a bad ID shows %d parts of an answer", n)
	}
	b.check("origin-invalid")

	// An ID no lease held.
	layout := e.reg.Layout()
	ts, _ := layout.Timestamp(l.mintAt)
	other, _ := layout.Compose(ts, (l.node+1)%int64(layout.Nodes()), 3)
	b.fill("#find-id", `"`+strconv.FormatInt(other, 10)+`"`)
	b.submit(`form[role="search"] button[type=submit]`)
	if got := b.text("#no-lease"); !strings.HasPrefix(got, "No lease known.") {
		t.Errorf("no lease: %q", got)
	}
	b.check("origin-none")
}
