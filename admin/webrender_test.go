package admin

import (
	"errors"
	"html/template"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/account"
	"github.com/idkeeper/idkeeper/audit"
	"github.com/idkeeper/idkeeper/internal/wire"
	"github.com/idkeeper/idkeeper/protocol"
)

// Every page template drawn with the states a running server rarely shows in a
// test: a recovered store, a store that does not answer, skew records, a node's
// detail, a revoked key, paging. A template that fails to execute is a 500 at run
// time; here it fails the test.
func TestPageTemplates(t *testing.T) {
	h := &Handler{log: slog.New(slog.DiscardHandler)}
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	admin := account.User{Name: "root", Role: account.RoleAdmin, CreatedAt: now}
	viewer := account.User{Name: "vera", Role: account.RoleViewer}
	row := leaseRow{Node: 7, Status: cellGrace, Machine: "host-<a>", PID: 42, StartedAt: now.Add(-time.Hour), KeyID: "k1",
		KeyDesc: "billing & co", Token: 9, ExpiresAt: now.Add(-time.Minute), GrantedAt: now.Add(-time.Hour),
		RenewedAt: now.Add(-30 * time.Minute), Skew: &skewView{Level: idkeeper.SkewWarn, Skew: formatSkew(1500 * time.Millisecond), ObservedAt: now}}
	cells := make([]mapCell, 130)
	cells[7] = mapCell{Status: cellGrace}
	lp := leasesPage{Counts: idkeeper.Counts{Total: 130, Remaining: 129, InGrace: 1}, Now: now,
		Map: renderNodeMap(cells, 0, func(int) string { return "?node=1" }, "map-h"), Rows: []leaseRow{row}, AllLeases: 3,
		Filter: leaseFilter{Requester: "host", Node: "7", node: 7}, KeyOptions: []keyOption{{"k1", "k1 · billing"}},
		Node: &nodeDetail{ID: 7, Found: true, Status: cellGrace, Lease: &row, State: &idkeeper.NodeState{NodeID: 7,
			Watermark: now.Add(-time.Minute), Floor: now.Add(time.Hour), QuarantinedUntil: now.Add(2 * time.Hour), LastToken: 9,
			Restorable: true}}, MaxNode: 129, SelfURL: "/admin/leases?node=7",
		LiveURL: "/admin/leases/live?node=7", RefreshMillis: 5000}
	for _, s := range cellStatuses {
		lp.Legend = append(lp.Legend, legendItem{Label: s.Label(), Cue: s.Cue(), Swatch: legendSwatch(s)})
	}
	lpOut := lp
	lpOut.Node = &nodeDetail{ID: 9999}
	lpErr := lp
	lpErr.Node = &nodeDetail{ID: 7, Found: true, Status: cellFree, StateErr: "the store does not answer"}
	recovered := idkeeper.StoreHealth{Phase: idkeeper.PhaseRecovering, Adopted: idkeeper.Generation{ID: "g", Number: 3,
		Origin: idkeeper.OriginRecovered, At: now}, ClockOffset: 1500 * time.Millisecond}
	reset := &resetReport{At: now, Generation: 3, QuarantineEnd: now.Add(time.Hour), Why: "the store is <empty>",
		Quarantined:   []idkeeper.QuarantineGroup{{Until: now.Add(time.Hour), Nodes: []idkeeper.NodeID{0, 1, 2, 3, 4, 5, 7, 8}}},
		QuarantinedAt: now, Restored: []audit.Entry{{Seq: 9, At: now, Actor: "key:k1", Action: audit.LeaseRestore,
			Target: "node:6", Detail: "restored 1 from receipts after a store reset, requester host-<a>/42"}},
		RestoredMore: 7, RestoredComplete: true}
	for id := 9; id < 130; id++ {
		reset.Quarantined[0].Nodes = append(reset.Quarantined[0].Nodes, idkeeper.NodeID(id))
	}
	jobs := idkeeper.StoreHealth{Phase: idkeeper.PhaseReady,
		Locks: []idkeeper.Lock{{Name: "api-key-expiry:k1", Owner: "me", LockedAt: now, Until: now.Add(24 * time.Hour)},
			{Name: "cleanup", Owner: "other", LockedAt: now, Until: now.Add(time.Minute)}},
		Runs: []idkeeper.JobRun{{Job: "cleanup", Started: now, Finished: now, Outcome: idkeeper.JobSkipped, Detail: "lock held by b"},
			{Job: "audit-retention", Started: now, Finished: now, Outcome: idkeeper.JobFailed, Detail: "store <down>"}}}
	onePool := newStorePool(idkeeper.StoreStatus{Pool: idkeeper.PoolSpec{First: 100, Nodes: 1}})
	key := keyView{ID: "k1", Description: "d", Status: idkeeper.KeyRevoked, RevokedAt: now, Held: 2}
	entries := []wire.AuditEntry{{Seq: 5, At: wire.FormatTime(now), Actor: "user:root", Action: "lease.revoke", Target: "node:7", Detail: "<b>"}}
	cases := []struct {
		tmpl, block, want string
		v                 view
	}{
		{"leases", "layout", "Its lease has expired", view{Title: "Leases", Nav: "leases", User: admin, SignedIn: true, P: lp}},
		{"leases", "layout", "1.5s (client behind)", view{Title: "Leases", User: viewer, SignedIn: true, P: lp}},
		{"leases", "live", "is not in the pool of 130", view{User: admin, SignedIn: true, P: lpOut}},
		{"leases", "live", "a holder's receipt may restore its lease here", view{User: admin, SignedIn: true, P: lp}},
		{"leases", "live", "in 2h 0m", view{User: admin, SignedIn: true, P: lp}},
		{"leases", "live", "cannot be read now: the store does not answer", view{User: admin, SignedIn: true, P: lpErr}},
		{"revoke", "layout", "holds no lease with fencing token 4", view{Title: "Revoke", User: admin, SignedIn: true,
			P: revokeView{Node: 3, Token: 4}}},
		{"store", "layout", "was recovered at", view{Title: "Store", User: admin, SignedIn: true,
			P: storeView{Health: recovered, Reset: reset, Config: idkeeper.Config{Grace: time.Minute}, Now: now}}},
		{"store", "layout", "And 7 more", view{Title: "Store", User: admin, SignedIn: true,
			P: storeView{Health: recovered, Reset: reset, Now: now}}},
		{"store", "layout", "0-5,7-129", view{Title: "Store", User: admin, SignedIn: true,
			P: storeView{Health: recovered, Reset: reset, Now: now}}},
		{"store", "layout", "The audit log cannot be read now", view{Title: "Store", User: admin, SignedIn: true,
			P: storeView{Health: recovered, Reset: &resetReport{At: now, QuarantinedErr: errors.New("x"), RestoredErr: errors.New("y")}}}},
		{"store", "layout", "Only the newest 10,000 entries", view{Title: "Store", User: admin, SignedIn: true,
			P: storeView{Health: recovered, Reset: &resetReport{At: now}}}},
		{"store", "layout", "The store does not answer", view{Title: "Store", User: admin, SignedIn: true,
			P: storeView{StatusErr: "the lease store does not answer", LocksErr: "the store does not answer"}}},
		{"store", "layout", "The job locks cannot be read now", view{Title: "Store", User: admin, SignedIn: true,
			P: storeView{LocksErr: "the store does not answer"}}},
		{"store", "layout", "this replica", view{Title: "Store", User: admin, SignedIn: true,
			P: storeView{Health: jobs, Config: idkeeper.Config{Owner: "me"}, Now: now}}},
		{"store", "layout", "lock held by b", view{Title: "Store", User: admin, SignedIn: true,
			P: storeView{Health: jobs, Config: idkeeper.Config{Owner: "me"}, Now: now}}},
		{"store", "layout", "This server does not serve the store", view{Title: "Store", User: admin, SignedIn: true,
			P: storeView{Health: idkeeper.StoreHealth{Phase: idkeeper.PhasePoolMismatch}, Config: idkeeper.Config{First: 7,
				Layout: idkeeper.DefaultLayout}, Pool: onePool, Now: now}}},
		{"store", "layout", `node IDs from 7 on layout <span class="mono">41/12/10@2026-01-01T00:00:00.000Z</span>`, view{Title: "Store",
			User: admin, SignedIn: true, P: storeView{Health: idkeeper.StoreHealth{Phase: idkeeper.PhasePoolMismatch},
				Config: idkeeper.Config{First: 7, Layout: idkeeper.DefaultLayout}, Pool: onePool, Now: now}}},
		{"store", "layout", "<dd>100 (1 node ID)</dd>", view{Title: "Store", User: admin, SignedIn: true,
			P: storeView{Health: idkeeper.StoreHealth{Phase: idkeeper.PhasePoolMismatch}, Pool: onePool, Now: now}}},
		{"store", "layout", "The store holds no pool", view{Title: "Store", User: admin, SignedIn: true, P: storeView{Now: now}}},
		{"key", "layout", "This key is revoked", view{Title: "Key", User: admin, SignedIn: true, P: keyPageView{Key: key}}},
		{"keycreated", "layout", "idk_secret", view{Title: "Created", User: admin, SignedIn: true, P: struct {
			Key    keyView
			Secret string
		}{key, "idk_secret"}}},
		{"keys", "layout", "There is no API key yet.", view{Title: "Keys", User: viewer, SignedIn: true, P: keysView{}}},
		{"allowlist", "layout", "The list is empty: every address is allowed.", view{Title: "Allow", User: admin, SignedIn: true,
			P: allowView{AllowsAll: true, Proxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}}},
		{"users", "layout", "There is no account.", view{Title: "Users", User: admin, SignedIn: true, P: usersView{Roles: allRoles,
			passwordBounds: pwBounds, Form: url.Values{"role": {"operator"}}}}},
		{"user", "layout", "This is your own account", view{Title: "User", User: admin, SignedIn: true, P: userView{Target: admin, Self: true}}},
		{"user", "layout", "Enable vera", view{Title: "User", User: admin, SignedIn: true,
			P: userView{Target: account.User{Name: "vera", Disabled: true, Role: account.RoleViewer}, Roles: allRoles, passwordBounds: pwBounds}}},
		{"profile", "layout", "Change your password", view{Title: "Profile", User: viewer, SignedIn: true,
			P: profileView{passwordBounds: pwBounds}}},
		{"profile", "layout", "<dd id=\"answer-status\">404 Not Found</dd>", view{Title: "Profile", User: viewer, SignedIn: true,
			P: profileView{passwordBounds: pwBounds, Webhook: "https://discord.com/api/webhooks/1/••••abcd", AlertsOn: true,
				Test: &webhookTestJSON{Status: 404, Body: `{"message": "Unknown Webhook"}`, Attempts: 1, Error: "gone"}}}},
		{"audit", "layout", "&lt;b&gt;", view{Title: "Audit", User: admin, SignedIn: true, P: auditView{Entries: entries,
			Actions: auditActions, Before: 10, NewestURL: "/admin/audit", OlderURL: "/admin/audit?before=5"}}},
		{"audit", "layout", "The audit log holds no entry older than #10", view{Title: "Audit", User: admin, SignedIn: true,
			P: auditView{Actions: auditActions, Before: 10}}},
		{"login", "layout", `name="next" value="/admin/keys"`, view{Title: "Log in", Error: "wrong", P: loginView{Next: "/admin/keys"}}},
		{"error", "layout", "Not here", view{Title: "Not found", P: struct{ Message string }{"Not here"}}},
	}
	for _, c := range cases {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodGet, "/admin/x", nil)
		h.renderBlock(rec, req, http.StatusOK, c.tmpl, c.block, c.v)
		body := rec.Body.String()
		if rec.Code != http.StatusOK || !strings.Contains(body, c.want) {
			t.Errorf("%s/%s: %d, want %q in:\n%s", c.tmpl, c.block, rec.Code, c.want, body)
		}
		if strings.Contains(body, "host-<a>") || strings.Contains(body, "<b>") && c.tmpl == "audit" {
			t.Errorf("%s: text not escaped", c.tmpl)
		}
	}
}

func TestPageHelpers(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		d    time.Duration
		want string
	}{{48 * time.Hour, "48h"}, {10 * time.Minute, "10m"}, {90 * time.Second, "1m30s"}, {0, "0s"}, {time.Hour + time.Second, "1h0m1s"}} {
		if got := shortDuration(c.d); got != c.want {
			t.Errorf("shortDuration(%s) = %q, want %q", c.d, got, c.want)
		}
	}
	for n, want := range map[int64]string{0: "0", 999: "999", 1000: "1,000", 1_024_000: "1,024,000", 123_456_789: "123,456,789"} {
		if got := grouped(n); got != want {
			t.Errorf("grouped(%d) = %q, want %q", n, got, want)
		}
	}
	if got := relTime(now.Add(9*time.Minute+30*time.Second), now); got != "in 9m 30s" {
		t.Errorf("relTime: %q", got)
	}
	if got := relTime(now.Add(-50*time.Hour), now); got != "2d 2h ago" {
		t.Errorf("relTime: %q", got)
	}
	if got := timeHTML(time.Time{}); got != template.HTML("—") {
		t.Errorf("zero time: %q", got)
	}
	for next, want := range map[string]string{"": "/admin/leases", "/admin/audit?x=1": "/admin/audit?x=1",
		"/admin/login": "/admin/leases", "/admin/static/admin.css": "/admin/leases", "http://x/admin/": "/admin/leases"} {
		if got := safeNext(next); got != want {
			t.Errorf("safeNext(%q) = %q, want %q", next, got, want)
		}
	}
	for in, want := range map[string]bool{"gzip": true, "br, gzip;q=0.5": true, "gzip;q=0": false, "deflate": false, "": false} {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.Header.Set("Accept-Encoding", in)
		if acceptsGzip(r) != want {
			t.Errorf("acceptsGzip(%q) != %t", in, want)
		}
	}
	if _, err := parseLocalTime("expiresAt", "tomorrow"); protocol.ErrorCode(err) != protocol.CodeInvalidRequest {
		t.Errorf("parseLocalTime: %v", err)
	}
	if tm, err := parseLocalTime("x", "2030-01-31T12:00"); err != nil || !tm.Equal(time.Date(2030, 1, 31, 12, 0, 0, 0, time.UTC)) {
		t.Errorf("parseLocalTime: %v %v", tm, err)
	}
	if st, msg := errorText(errors.New("secret detail")); st != 500 || strings.Contains(msg, "secret") {
		t.Errorf("errorText hides causes: %d %q", st, msg)
	}
	f := parseLeaseFilter(url.Values{"node": {"12"}, "status": {"bogus"}, "requester": {"  ab "}})
	if f.node != 12 || f.Status != "" || f.Requester != "ab" || !f.Any() {
		t.Errorf("filter %+v", f)
	}
}
