package admin_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/idkeeper/idkeeper/apikey"
)

// TestBrowserFormOnce creates a key in Chromium with the form sent twice (a
// first submit whose answer the browser never shows, as a double click leaves
// it, then the real submit with the same token): one key, its secret on the
// page the redirect leads to, and a reload of that page makes no second key,
// asks nothing and shows no secret.
func TestBrowserFormOnce(t *testing.T) {
	e := newWebEnv(t)
	b := newBrowser(t, e.url)
	b.open("/admin/login")
	b.fill("#login-name", "admin")
	b.fill("#login-password", webAdminPW)
	b.submit(`form[action="/admin/login"] button[type=submit]`)
	b.open("/admin/keys")
	b.fill("#k-desc", "sent twice")
	// The first submit: the same form, token and all; its redirect is not followed.
	status := run(b, "the first submit", chromedp.Evaluate[float64](`(async () => {
		const f = document.querySelector('form[action="/admin/keys"]');
		const r = await fetch(f.action, {method: "POST", body: new URLSearchParams(new FormData(f)), redirect: "manual"});
		return r.type === "opaqueredirect" ? 303 : r.status;
	})()`, chromedp.EvalAwaitPromise))
	if status != 303 {
		t.Fatalf("the first submit answered %v", status)
	}
	b.submit(`form[action="/admin/keys"] button[type=submit]`)
	if p := b.path(); !strings.HasSuffix(p, "/created") {
		t.Fatalf("after the create the browser is at %s", p)
	}
	if flash := b.text(".flash"); !strings.Contains(flash, "sent twice: the change was made once") {
		t.Errorf("the second submit's message %q", flash)
	}
	secret := b.text("#new-secret")
	if !strings.HasPrefix(secret, "idk_") {
		t.Fatalf("the page shows the secret %q", secret)
	}
	keys, err := e.reg.Keys(context.Background())
	if err != nil || len(keys) != 1 {
		t.Fatalf("%d keys after a double submit: %v", len(keys), err)
	}
	if _, err := e.reg.Authenticate(context.Background(), secret); err != nil {
		t.Errorf("the secret shown is not the key's: %v", err)
	}
	// A reload: a GET (no resubmit prompt), no second key, no secret.
	b.do("reload", chromedp.Reload())
	b.waitFor("the reloaded page", `document.readyState === "complete" && document.getElementById("new-secret") === null`, 5*time.Second)
	if nav := eval[string](b, `performance.getEntriesByType("navigation")[0].type`); nav != "reload" {
		t.Errorf("navigation type %q", nav)
	}
	if got := b.text("#secret-gone"); !strings.Contains(got, "was shown once") {
		t.Errorf("the reloaded page says %q", got)
	}
	if ks, _ := e.reg.Keys(context.Background()); len(ks) != 1 {
		t.Errorf("%d keys after the reload", len(ks))
	}
	b.checkA11y("key-created-reloaded")
}

// TestBrowserLeaseListFits: the lease list, with long requesters, key
// descriptions and clock skews, fits a 1280 px window without sideways
// scrolling, and a phone's width as every page does; the node's page holds
// what the list leaves out.
func TestBrowserLeaseListFits(t *testing.T) {
	e := newWebEnv(t)
	ctx := context.Background()
	secret, _, err := apikey.NewAdmin(e.reg).Create(ctx, apikey.Spec{Description: "billing service, production, eu-west-1 cluster"})
	if err != nil {
		t.Fatal(err)
	}
	// Skews past half the grace period (10 min) are warnings the store records.
	for i, skew := range []time.Duration{0, 7 * time.Minute, -6 * time.Minute, 7*time.Minute + 300*time.Millisecond} {
		var out struct{}
		req := e.requesterJSON(fmt.Sprintf("billing-7f9c-%d", i), 100000+i)
		req["instance"] = fmt.Sprintf("i-0abc%04d-5f6e-4d3c-9b8a-7e6f5d4c3b2a", i)
		e.v1("/v1/leases", secret, map[string]any{"requester": req, "count": 2,
			"clientUtcNow": time.Now().Add(-skew).UTC().Format(time.RFC3339Nano)}, &out)
	}
	b := newBrowser(t, e.url)
	b.open("/admin/login")
	b.fill("#login-name", "admin")
	b.fill("#login-password", webAdminPW)
	b.submit(`form[action="/admin/login"] button[type=submit]`)
	b.open("/admin/leases")
	fits := func(what string) {
		t.Helper()
		got := eval[[]float64](b, `(() => { const w = document.querySelector("#live-list .table-wrap");
			return [w.scrollWidth, w.clientWidth, document.documentElement.scrollWidth, window.innerWidth]; })()`)
		if got[0] > got[1] || got[2] > got[3] {
			t.Errorf("%s: the lease list is %v px wide in %v px, the page %v px in %v px", what, got[0], got[1], got[2], got[3])
		}
	}
	fits("1280x800")
	list := b.text("#live-list")
	for _, want := range []string{"Clock skew", "Revoke", "billing-7f9c-2", "billing service, production", "Expires"} {
		if !strings.Contains(list, want) {
			t.Errorf("the list lacks %q: %s", want, list)
		}
	}
	b.check("leases-skew")
	// The node's page has the fencing token and the window the list leaves out.
	b.submit(`#live-list a[aria-label^="Node "]`)
	node := b.text("main")
	for _, want := range []string{"Fencing token", "Window", "Clock skew"} {
		if !strings.Contains(node, want) {
			t.Errorf("the node's page lacks %q", want)
		}
	}
	fits("the node's page at 1280x800")
}
