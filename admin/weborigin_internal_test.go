package admin

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/account"
	"github.com/idkeeper/idkeeper/snowflake"
)

// TestOriginTemplate draws the "Find an ID" page with the answers a running
// server rarely gives in a test: a contested node ID (two leases, one learned
// from a receipt), every end of a lease, a key no longer in the store, a lease
// without client info, an empty window, a hostile host and labels (escaped).
func TestOriginTemplate(t *testing.T) {
	h := &Handler{log: slog.New(slog.DiscardHandler)}
	viewer := account.User{Name: "vera", Role: account.RoleViewer}
	at := time.Date(2026, 11, 30, 12, 0, 0, 123_000_000, time.UTC)
	layout := idkeeper.DefaultLayout
	ts, err := layout.Timestamp(at)
	if err != nil {
		t.Fatal(err)
	}
	id, err := layout.Compose(ts, 7, 3)
	if err != nil {
		t.Fatal(err)
	}
	parts, err := layout.Decode(id)
	if err != nil {
		t.Fatal(err)
	}
	rec := func(token uint64, end idkeeper.LeaseEnd) idkeeper.HistoryRecord {
		r := idkeeper.HistoryRecord{NodeID: 7, Token: token, KeyID: "k1",
			Requester: idkeeper.Requester{MachineID: "host-<a>", PID: 42, StartedAt: at.Add(-time.Hour), Instance: "inst-1"},
			Client:    idkeeper.ClientInfo{Host: "web-<7>", Labels: map[string]string{"team": "<b>", "app": "orders"}},
			GrantedAt: at.Add(-time.Minute), NotBefore: at.Add(-time.Minute), WindowEnd: at.Add(time.Hour), End: end}
		if end != idkeeper.EndHeld {
			r.EndedAt = at.Add(time.Minute)
		}
		return r
	}
	render := func(p originPage, status int) string {
		t.Helper()
		w := httptest.NewRecorder()
		h.renderBlock(w, httptest.NewRequest(http.MethodGet, "/admin/ids", nil), status, "origin", "layout",
			view{Title: "Find an ID", Nav: "ids", User: viewer, SignedIn: true, P: p})
		if w.Code != status {
			t.Fatalf("status %d, want %d: %s", w.Code, status, w.Body)
		}
		body := w.Body.String()
		if strings.Contains(body, "host-<a>") || strings.Contains(body, "<b>") || strings.Contains(body, "web-<7>") {
			t.Errorf("text not escaped: %s", body)
		}
		return body
	}
	result := func(recs ...idkeeper.HistoryRecord) *originResult {
		res := &originResult{ID: "1", Parts: parts, Layout: layout, NodeLink: true}
		for i, r := range recs {
			l := originLease{HistoryRecord: r, OpenStart: r.NotBefore.Before(layout.Epoch), EmptyWindow: r.WindowEnd.Before(r.NotBefore),
				N: i + 1}
			for _, k := range r.Client.LabelKeys() {
				l.Labels = append(l.Labels, originLabel{k, r.Client.Labels[k]})
			}
			res.Leases = append(res.Leases, l)
		}
		return res
	}

	// Contested: both leases, the warning, one from a receipt.
	a, b := rec(8, idkeeper.EndContested), rec(9, idkeeper.EndContested)
	b.FromReceipt, b.KeyID = true, ""
	res := result(a, b)
	res.Leases[0].KeyKnown, res.Leases[0].KeyDesc = true, "billing & co"
	body := render(originPage{Input: "1", Result: res}, http.StatusOK)
	for _, want := range []string{`<div class="warning" id="contested"><p><strong>2 leases held node 7 at that millisecond.</strong>`,
		"either may have minted this ID", "Minted by one of 2 leases", "Lease 1 of 2: fencing token 8", "Lease 2 of 2: fencing token 9",
		`<span class="badge quarantined">contested</span> at <time datetime="2026-11-30T12:01:00.123Z">2026-11-30 12:01:00.123Z</time>: two holders claimed the node ID`,
		"from a receipt: the store learned this grant", `<a class="mono" href="/admin/keys/k1">k1</a><br><span class="muted">billing &amp; co</span>`,
		`<dt>API key</dt><dd><span class="muted">unknown</span>`, `<li class="mono">app=orders</li><li class="mono">team=&lt;b&gt;</li>`,
		`<dd id="decoded-time"><time datetime="2026-11-30T12:00:00.123Z">2026-11-30 12:00:00.123Z</time>`, `<dd id="decoded-seq">3</dd>`,
		`<a href="/admin/leases?node=7" aria-label="Node 7 on the leases page">7</a>`, "41 timestamp, 12 node and 10 sequence bits"} {
		if !strings.Contains(body, want) {
			t.Errorf("contested: no %s", want)
		}
	}
	if strings.Count(body, `class="panel lease"`) != 2 || strings.Count(body, "from a receipt") != 1 {
		t.Errorf("contested: %d leases, %d from a receipt", strings.Count(body, `class="panel lease"`), strings.Count(body, "from a receipt"))
	}

	// Every end, one lease each: no warning.
	removed := rec(5, idkeeper.EndRemoved)
	removed.MintedUpTo = at
	for r, want := range map[*idkeeper.HistoryRecord]string{
		&removed:                           `<span class="badge none">removed</span> at <time datetime="2026-11-30T12:01:00.123Z">2026-11-30 12:01:00.123Z</time>: its holder released it; it said it minted up to <time datetime="2026-11-30T12:00:00.123Z">`,
		ptr(rec(5, idkeeper.EndReclaimed)): `<span class="badge expired">reclaimed</span> at <time`,
		ptr(rec(5, idkeeper.EndRevoked)):   `<span class="badge revoked">revoked</span> at <time datetime="2026-11-30T12:01:00.123Z">2026-11-30 12:01:00.123Z</time>: an operator revoked it`,
		ptr(rec(5, idkeeper.EndHeld)):      `<span class="badge leased">held</span> the lease has not ended: its holder may still be minting`,
	} {
		res := result(*r)
		body := render(originPage{Result: res}, http.StatusOK)
		if !strings.Contains(body, want) || strings.Contains(body, `id="contested"`) || strings.Contains(body, "Lease 1 of") {
			t.Errorf("end %q: no %s in\n%s", r.End, want, body)
		}
		if !strings.Contains(body, `<dt>API key</dt><dd><span class="mono">k1</span> <span class="muted">(not in the store now)</span>`) {
			t.Errorf("end %q: the key no longer in the store", r.End)
		}
	}

	// No client info, an open start, an empty window.
	bare := rec(1, idkeeper.EndRemoved)
	bare.Client, bare.NotBefore, bare.WindowEnd = idkeeper.ClientInfo{}, time.UnixMilli(1), time.UnixMilli(0)
	body = render(originPage{Result: result(bare)}, http.StatusOK)
	for _, want := range []string{`<dt>Host</dt><dd><span class="muted">not reported</span>`, `<dt>Labels</dt><dd><span class="muted">none reported</span>`,
		"open (from the layout's epoch)", "(empty: no millisecond)"} {
		if !strings.Contains(body, want) {
			t.Errorf("bare lease: no %s", want)
		}
	}

	// No lease: the note, capitalised after the box's own words.
	res = result()
	res.Note, res.NodeLink = "no lease known: its time 2030-01-01T00:00:00Z lies in the future", false
	body = render(originPage{Result: res}, http.StatusOK)
	if !strings.Contains(body, `<strong>No lease known.</strong> Its time 2030-01-01T00:00:00Z lies in the future.</p>`) ||
		!strings.Contains(body, `<dd id="decoded-node">7</dd>`) || strings.Contains(body, "The window is") {
		t.Errorf("no lease: %s", body)
	}
	if got := (originResult{Note: "node ID 5000 lies outside this registry's pool"}).NoteText(); got != "Node ID 5000 lies outside this registry's pool." {
		t.Errorf("NoteText: %q", got)
	}

	// A bad ID: the error at the box only.
	_, perr := snowflake.ParseID("1x")
	body = render(originPage{Input: "1x", InputError: idInputError(perr)}, http.StatusBadRequest)
	if !strings.Contains(body, `aria-invalid="true"`) || !strings.Contains(body, `<span class="field-error" id="find-id-error">Not an ID: &#34;1x&#34;: &#39;x&#39; is not a decimal digit.`) ||
		strings.Contains(body, `id="result-h"`) || strings.Contains(body, "snowflake:") {
		t.Errorf("bad ID: %s", body)
	}
}

func ptr[T any](v T) *T { return &v }
