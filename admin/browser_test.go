package admin_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/alert"
	"github.com/idkeeper/idkeeper/apikey"
	"github.com/idkeeper/idkeeper/backup"
	"github.com/idkeeper/idkeeper/discord"
)

// TestBrowser drives the admin web in the machine's Chromium (issue #10): log in,
// create an API key and read its secret off the page, lease node IDs with it
// through /v1, see the lease appear on the map and in the list by the page's own
// refresh, revoke it, set a Discord webhook on the profile and send it a test
// message, find the audit entries, log out; then log in to a second server, on
// node IDs 100-163 and a layout of its own, whose store page shows its node range
// and layout (issue #22). On the way every page is
// checked with axe-core (no serious or critical violation) and photographed at
// desktop and phone width (browser_helpers_test.go says where the pictures go).
// It fails, never skips, without Chromium or axe-core: run it with scripts/test.
func TestBrowser(t *testing.T) {
	began := time.Now()
	e := newWebEnv(t)
	e.addUser("vera", "viewer")
	b := newBrowser(t, e.url)

	// Not logged in: the pages send the browser to the login page.
	b.open("/admin/leases")
	if p := b.path(); p != "/admin/login?next=%2Fadmin%2Fleases" {
		t.Fatalf("not logged in, /admin/leases shows %s", p)
	}
	b.check("login")
	b.fill("#login-name", "admin")
	b.fill("#login-password", webAdminPW)
	if st := b.submit(`form[action="/admin/login"] button[type=submit]`); st != http.StatusOK {
		t.Fatalf("login answered %d", st)
	}
	if p := b.path(); p != "/admin/leases" {
		t.Fatalf("after the login the browser is at %s, want /admin/leases", p)
	}
	if !strings.Contains(b.text("#live-list"), "No node ID is leased right now") {
		t.Errorf("no empty state on the leases page")
	}
	b.check("leases-empty")
	// The keyboard: the first Tab reaches the skip link, and the focus shows.
	b.do("tab", chromedpKey("\t"))
	if got := eval[string](b, `document.activeElement.className + "|" + getComputedStyle(document.activeElement).outlineStyle`); got != "skip|solid" {
		t.Errorf("first Tab focuses %q, want the skip link with a visible outline", got)
	}

	// Create a key; its secret is on the page once.
	b.open("/admin/keys")
	b.checkA11y("keys-empty")
	b.fill("#k-desc", "billing service, production")
	b.fill("#k-quota", "4")
	if st := b.submit(`form[action="/admin/keys"] button[type=submit]`); st != http.StatusOK {
		t.Fatalf("create key answered %d", st)
	}
	secret := b.text("#new-secret")
	if !strings.HasPrefix(secret, "idk_") || len(secret) < 40 {
		t.Fatalf("the page shows the secret %q", secret)
	}
	if !strings.Contains(b.text("main"), "it will not be shown again") {
		t.Error("no warning that the secret is shown once")
	}
	b.do("copy", chromedpClick("button[data-copy]"))
	b.waitFor("the copy button's answer", `document.getElementById("copy-status").textContent !== ""`, 5*time.Second)
	// The pictures never hold a secret, even a test's.
	eval[bool](b, `(document.getElementById("new-secret").textContent = "idk_" + "•".repeat(43), true)`)
	b.check("key-created")

	// Lease two node IDs through /v1 while the leases page is open: its refresh
	// shows them on the map and in the list, with no reload.
	b.open("/admin/leases")
	b.do("mark the page", chromedpEval(`window.__notReloaded = true`))
	nodes := e.alloc(secret, "billing-7f9c", 4242, 2)
	if len(nodes) != 2 {
		t.Fatalf("alloc gave %v", nodes)
	}
	for _, n := range nodes {
		b.waitFor(fmt.Sprintf("node %d on the map and in the list", n),
			fmt.Sprintf(`document.querySelector('#live-pool a[href="?node=%d"] rect.l') !== null && `+
				`document.querySelector('#live-list a[aria-label="Node %d"]') !== null`, n, n), 15*time.Second)
	}
	if !eval[bool](b, `window.__notReloaded === true`) {
		t.Error("the leases page reloaded instead of refreshing itself")
	}
	if got := b.text("#count-leased"); got != "2" {
		t.Errorf("leased count %q, want 2", got)
	}
	list := b.text("#live-list")
	for _, want := range []string{"billing-7f9c", "PID 4242", "billing service, production", "none recorded", "leased"} {
		if !strings.Contains(list, want) {
			t.Errorf("the list lacks %q: %s", want, list)
		}
	}
	tip := eval[string](b, fmt.Sprintf(`document.querySelector('#live-pool a[href="?node=%d"] title').textContent`, nodes[0]))
	if !strings.Contains(tip, "leased") || !strings.Contains(tip, "billing-7f9c") {
		t.Errorf("map tooltip %q", tip)
	}
	// More holders, for a fuller picture: another key's services, one of which
	// stopped without saying what it minted (its node IDs cool).
	if _, _, err := apikey.NewAdmin(e.reg).Create(context.Background(), apikey.Spec{Description: "search indexer", CreatedBy: "cli"}); err != nil {
		t.Fatal(err)
	}
	otherSecret, _, err := apikey.NewAdmin(e.reg).Create(context.Background(), apikey.Spec{Description: "order service", CreatedBy: "env"})
	if err != nil {
		t.Fatal(err)
	}
	e.alloc(otherSecret, "orders-5d8b", 1, 3)
	e.alloc(otherSecret, "orders-91ac", 1, 2)
	e.alloc(otherSecret, "orders-batch", 77, 40)
	e.remove(otherSecret, "orders-batch", 77)
	b.open("/admin/leases")
	if got := b.text("#count-leased") + "/" + b.text("#count-cooling"); got != "7/40" {
		t.Errorf("leased/cooling counts %q, want 7/40", got)
	}
	b.check("leases")

	// A cell of the map opens its node.
	b.submit(fmt.Sprintf(`#live-pool a[href="?node=%d"]`, nodes[0]))
	if h := b.text("#node-h"); h != fmt.Sprintf("Node %d", nodes[0]) {
		t.Errorf("node detail %q", h)
	}

	// Revoke the first lease: the confirm step says what happens.
	b.open("/admin/leases")
	b.submit(fmt.Sprintf(`#live-list a[aria-label="Revoke the lease on node %d"]`, nodes[0]))
	confirm := b.text("main")
	if !strings.Contains(confirm, fmt.Sprintf("Node %d will be quarantined until", nodes[0])) ||
		!strings.Contains(confirm, "the holder learns at its next Renew") {
		t.Errorf("confirm page: %s", confirm)
	}
	b.check("revoke")
	if st := b.submit(`form[action="/admin/leases/revoke"] button[type=submit]`); st != http.StatusOK {
		t.Fatalf("revoke answered %d", st)
	}
	if flash := b.text(".flash"); !strings.Contains(flash, "was revoked: the node ID is quarantined until") {
		t.Errorf("after the revocation: %q", flash)
	}
	b.waitFor("the revoked node quarantined on the map",
		fmt.Sprintf(`document.querySelector('#live-pool a[href="?node=%d"] rect.q') !== null`, nodes[0]), 5*time.Second)
	b.check("leases-node")

	// The key's own page: set its expiry and quota.
	keys, err := e.reg.Keys(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var keyID string
	for _, k := range keys {
		if k.Key.Description == "billing service, production" {
			keyID = k.Key.ID
		}
	}
	b.open("/admin/keys/" + keyID)
	b.fill("#e-quota", "8")
	b.do("set the expiry", chromedpEval(`document.getElementById("e-exp").value = "2099-12-31T23:00"`))
	b.submit(`form[action="/admin/keys/` + keyID + `"] button[type=submit]`)
	if flash := b.text(".flash"); !strings.Contains(flash, "were saved") {
		t.Errorf("after saving the key: %q", flash)
	}
	b.check("key")
	b.open("/admin/keys")
	b.check("keys")

	// The allow-list: add an entry (loopback, so /v1 keeps answering this test).
	b.open("/admin/allowlist")
	b.fill("#a-prefix", "127.0.0.0/8")
	b.fill("#a-note", "this machine")
	b.submit(`form[action="/admin/allowlist"] button[type=submit]`)
	if flash := b.text(".flash"); !strings.Contains(flash, "127.0.0.0/8 was added") {
		t.Errorf("after adding to the allow-list: %q", flash)
	}
	b.check("allowlist")

	// Users: add one, open it.
	b.open("/admin/users")
	b.fill("#u-name", "olivia")
	b.do("role", chromedpEval(`document.getElementById("u-role").value = "operator"`))
	b.fill("#u-pw", "olivia-password-01")
	b.submit(`form[action="/admin/users"] button[type=submit]`)
	if p := b.path(); p != "/admin/users/olivia" {
		t.Errorf("after adding a user: %s", p)
	}
	b.check("user")
	b.open("/admin/users")
	b.check("users")
	b.open("/admin/profile")
	b.check("profile")
	// Discord alerts: set a webhook on the profile, send a test message, read
	// Discord's answer on the page; the fake Discord got the message. The page
	// shows the webhook masked only.
	hook := e.discord.Webhook("112233445566778899")
	b.fill("#hook-url", hook)
	if st := b.submit(`form[action="/admin/profile/webhook"] button[type=submit]`); st != http.StatusOK {
		t.Fatalf("save the webhook answered %d", st)
	}
	if flash := b.text(".flash"); !strings.Contains(flash, "Your Discord webhook was saved") {
		t.Errorf("after saving the webhook: %q", flash)
	}
	if got := b.text("#hook-current"); got != discord.Mask(hook) {
		t.Errorf("the profile shows the webhook %q, want %q", got, discord.Mask(hook))
	}
	token := hook[strings.LastIndexByte(hook, '/')+1:]
	if html := eval[string](b, `document.documentElement.outerHTML + document.getElementById("hook-url").value`); strings.Contains(html, token) {
		t.Error("the profile page holds the webhook's token")
	}
	if st := b.submit(`form[action="/admin/profile/webhook/test"] button[type=submit]`); st != http.StatusOK {
		t.Fatalf("send test message answered %d", st)
	}
	if got := b.text("#answer-status"); got != "200 OK" {
		t.Errorf("Discord's answer on the page: status %q", got)
	}
	if body := b.text("#answer-body"); !strings.Contains(body, "IdKeeper test message") || strings.Contains(body, token) {
		t.Errorf("Discord's answer on the page: body %q", body)
	}
	if calls := e.discord.WaitCalls(t, 1, 5*time.Second); calls[0].WebhookID != "112233445566778899" ||
		!strings.Contains(calls[0].Message.Content, "IdKeeper test message") || !strings.Contains(calls[0].Message.Content, "admin") {
		t.Errorf("the fake Discord got %+v", calls)
	}
	b.check("profile-webhook")
	// The store page: the job locks held in the store and this replica's last runs.
	if _, _, err := e.reg.Cleanup(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := e.reg.WarnExpiringKeys(context.Background()); err != nil {
		t.Fatal(err)
	}
	// and the Discord alerts: one check, which finds capacity short of a
	// threshold of the whole pool as long as any node ID is leased.
	al, err := alert.New(alert.Config{Store: e.store, Sender: &discord.Client{HTTP: e.discord.HTTPClient()}, Owner: "replica-b",
		Logger: slog.New(slog.DiscardHandler), CapacityThreshold: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer al.Close()
	if ran, err := al.Check(context.Background(), e.reg); !ran || err != nil {
		t.Fatalf("alert check: %v, %v", ran, err)
	}
	b.open("/admin/store")
	if main := b.text("main"); !strings.Contains(main, "this replica") || !strings.Contains(main, "reclaimed 0 leases") ||
		!strings.Contains(main, "warned about 0 keys") {
		t.Errorf("the store page lacks the job lock or the runs: %s", main)
	}
	if main := b.text("main"); !strings.Contains(main, "1 user gets the alerts in Discord") || !strings.Contains(main, "standing") ||
		!strings.Contains(main, "of 4096 node IDs free; the alert threshold is 4096") {
		t.Errorf("the store page lacks the alerts: %s", main)
	}
	b.check("store")

	// Backups: the empty folder; backups the schedule left, and one made now;
	// the delete step.
	b.open("/admin/backups")
	if !strings.Contains(b.text("main"), "No backup yet") {
		t.Errorf("no empty state on the backups page")
	}
	b.checkA11y("backups-empty")
	for _, ago := range []time.Duration{50 * time.Hour, 26 * time.Hour, 2 * time.Hour} {
		if _, _, err := e.backups.Folder().Create(context.Background(), e.store, backup.Source{Store: "bolt"},
			time.Now().Add(-ago)); err != nil {
			t.Fatal(err)
		}
	}
	if st := b.submit(`form[action="/admin/backups"] button[type=submit]`); st != http.StatusOK {
		t.Fatalf("back up now answered %d", st)
	}
	if flash := b.text(".flash"); !strings.Contains(flash, "was written") {
		t.Errorf("after back up now: %q", flash)
	}
	if n := eval[int](b, `document.querySelectorAll('main tbody tr').length`); n != 4 {
		t.Errorf("the backups page lists %d backups, want 4", n)
	}
	b.check("backups")
	b.submit(`main tbody tr:last-child a[aria-label^="Delete "]`)
	if !strings.Contains(b.text("main"), "The file will be gone for good") {
		t.Errorf("the delete confirmation: %s", b.text("main"))
	}
	b.checkA11y("backup-delete")
	b.submit(`form[action="/admin/backups/delete"] button[type=submit]`)
	if flash := b.text(".flash"); !strings.Contains(flash, "was deleted") {
		t.Errorf("after the delete: %q", flash)
	}

	// The audit log holds the key's creation, the grant and the revocation.
	want := []string{"apikey.create", "lease.grant", "lease.revoke", "allowlist.add", "user.create", "user.login"}
	deadline := time.Now().Add(5 * time.Second)
	var audit string
	for {
		b.open("/admin/audit")
		audit = eval[string](b, `(document.querySelector("main table") || {innerText: ""}).innerText`)
		missing := ""
		for _, a := range want {
			if !strings.Contains(audit, a+"\t") && !strings.Contains(audit, a+" ") && !strings.Contains(audit, a+"\n") {
				missing += " " + a
			}
		}
		if missing == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the audit log lacks%s:\n%s", missing, audit)
		}
		time.Sleep(200 * time.Millisecond)
	}
	b.check("audit")
	b.do("filter", chromedpEval(`document.getElementById("a-action").value = "lease"`))
	b.submit(`form[action="/admin/audit"] button[type=submit]`)
	if filtered := b.text("table"); !strings.Contains(filtered, "lease.revoke") || strings.Contains(filtered, "apikey.create") {
		t.Errorf("filtered audit log: %s", filtered)
	}

	// Log out: the pages send the browser to the login page again.
	b.open("/admin/leases")
	if st := b.submit(`.who button[type=submit]`); st != http.StatusOK {
		t.Fatalf("logout answered %d", st)
	}
	if flash := b.text(".flash"); !strings.Contains(flash, "You have logged out.") {
		t.Errorf("after logout: %q", flash)
	}
	b.open("/admin/leases")
	if p := b.path(); !strings.HasPrefix(p, "/admin/login?next=") {
		t.Errorf("after logout /admin/leases shows %s", p)
	}

	// A viewer sees the pages without a button that would fail (webpages_test.go
	// checks the forms of every page for every role).
	b.fill("#login-name", "vera")
	b.fill("#login-password", webAdminPW)
	b.submit(`form[action="/admin/login"] button[type=submit]`)
	b.waitFor("the list", `document.querySelector('#live-list a[aria-label^="Node "]') !== null`, 5*time.Second)
	if n := eval[int](b, `document.querySelectorAll('main form[method="post"], main a.button.danger').length`); n != 0 {
		t.Errorf("a viewer's leases page has %d buttons that change state", n)
	}
	b.open("/admin/keys")
	if n := eval[int](b, `document.querySelectorAll('main form[method="post"]').length`); n != 0 {
		t.Errorf("a viewer's keys page has %d forms", n)
	}

	// A registry on node IDs 100-163 and a layout of its own (41/10/12 bits from
	// 2025): the store page says so, with the ceiling per node ID and the end of
	// the layout's range. The same tab logs in to that second server.
	layout, err := idkeeper.ParseLayout("41/10/12@2025-01-01T00:00:00.000Z")
	if err != nil {
		t.Fatal(err)
	}
	e2 := newWebEnvPool(t, idkeeper.PoolSpec{First: 100, Nodes: 64, Layout: layout})
	b.base = e2.url
	b.open("/admin/store")
	if p := b.path(); p != "/admin/login?next=%2Fadmin%2Fstore" {
		t.Fatalf("not logged in to the second server, /admin/store shows %s", p)
	}
	b.fill("#login-name", "admin")
	b.fill("#login-password", webAdminPW)
	if st := b.submit(`form[action="/admin/login"] button[type=submit]`); st != http.StatusOK {
		t.Fatalf("login to the second server answered %d", st)
	}
	pool := b.text("dl[aria-labelledby=pool-h]")
	for _, want := range []string{"100–163 (64 node IDs)", "41/10/12, epoch 2025-01-01T00:00:00.000Z", "4,096,000 IDs/s",
		"0–1023", "2094-09-07"} {
		if !strings.Contains(pool, want) {
			t.Errorf("the store page of node IDs 100-163 lacks %q in its pool: %s", want, pool)
		}
	}
	b.check("store-pool")

	t.Logf("browser test: %d pages checked by axe-core, screenshots in %s, %s", b.axeRuns, b.shot, time.Since(began).Round(time.Millisecond))
}
