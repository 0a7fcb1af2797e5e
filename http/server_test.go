package http_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idkeeper/idkeeper"
	idkhttp "github.com/idkeeper/idkeeper/http"
	"github.com/idkeeper/idkeeper/internal/harness/registrytest"
	"github.com/idkeeper/idkeeper/protocol"
)

func TestScenario(t *testing.T) { stores(t, scenario) }

// scenario is the README's curl session: alloc 2, the same again, renew, remaining,
// remove.
func scenario(t *testing.T, h *harness) {
	who := requesterJSON(4242)
	alloc := `{"requester":` + who + `,"count":2,"clientUtcNow":"` + ts(start) + `"}`

	r := h.post("/v1/leases", alloc).ok(t)
	assertKeys(t, r.raw, "layout", "leases", "serverUtcNow")
	var layout map[string]any
	_ = json.Unmarshal(mustJSON(r.body["layout"]), &layout)
	if fmt.Sprint(layout) != "map[epoch:2026-01-01T00:00:00.000Z nodeBits:12 sequenceBits:10 timestampBits:41]" {
		t.Fatalf("layout %v", layout)
	}
	if r.str("serverUtcNow") != ts(start) {
		t.Fatalf("serverUtcNow %q", r.str("serverUtcNow"))
	}
	first := r.leases(t)
	if len(first) != 2 || first[0].NodeID == first[1].NodeID {
		t.Fatalf("leases %+v", first)
	}
	for _, l := range first {
		if l.ExpiresAt != ts(start.Add(10*time.Minute)) || l.FencingToken == 0 {
			t.Fatalf("lease %+v", l)
		}
		// Fresh node IDs: no watermark yet, so the window opens at the layout's epoch.
		if l.NotBefore != "2026-01-01T00:00:00.000Z" {
			t.Fatalf("notBefore %q", l.NotBefore)
		}
	}
	assertKeys(t, mustJSON(firstLease(r)), "nodeId", "notBefore", "expiresAt", "fencingToken", "receipt")

	// The same requester and count again (a retry after a lost answer): the same node
	// IDs and tokens, the first lease refreshed from now.
	h.clk.Advance(time.Minute)
	again := h.post("/v1/leases", alloc).ok(t).leases(t)
	for i := range first {
		want := first[i]
		want.ExpiresAt = ts(start.Add(11 * time.Minute))
		want.Receipt = again[i].Receipt // a new expiry, a new receipt
		if again[i] != want || again[i].Receipt == first[i].Receipt {
			t.Fatalf("idempotent alloc: %+v, want %+v", again[i], want)
		}
	}

	h.clk.Advance(time.Minute)
	now := start.Add(2 * time.Minute)
	renew := fmt.Sprintf(`{"requester":%s,"clientUtcNow":"%s","fencingTokens":[%d,%d]}`, who, ts(now), first[0].FencingToken, first[1].FencingToken)
	r = h.post("/v1/leases/renew", renew).ok(t)
	assertKeys(t, r.raw, "leases", "serverUtcNow")
	renewed := r.leases(t)
	if len(renewed) != 2 || r.str("serverUtcNow") != ts(now) {
		t.Fatalf("renew: %s", r.raw)
	}
	for i, l := range renewed {
		if l.NodeID != first[i].NodeID || l.FencingToken != first[i].FencingToken || l.NotBefore != first[i].NotBefore ||
			l.ExpiresAt != ts(now.Add(idkeeper.DefaultLeaseDuration)) {
			t.Fatalf("renewed %+v from %+v", l, first[i])
		}
	}

	r = h.get("/v1/leases/remaining").ok(t)
	assertKeys(t, r.raw, "first", "last", "total", "remaining", "leased", "inGrace", "quarantined", "cooling")
	assertCounts(t, r, 4096, 4094, 2, 0, 0)
	if r.num("first") != 0 || r.num("last") != 4095 {
		t.Fatalf("remaining: the node range is not 0-4095: %s", r.raw)
	}

	// As the README: nothing minted, so mintedUpTo is the epoch; ready at once.
	r = h.post("/v1/leases/remove", `{"requester":`+who+`,"mintedUpTo":"2026-01-01T00:00:00.000Z"}`).ok(t)
	assertKeys(t, r.raw, "removed")
	if r.num("removed") != 2 {
		t.Fatalf("remove: %s", r.raw)
	}
	r = h.get("/v1/leases/remaining").ok(t)
	assertCounts(t, r, 4096, 4096, 0, 0, 0)
	if r.num("cooling") != 0 || r.str("nextReadyAt") != "" {
		t.Fatalf("remaining after a remove with mintedUpTo: %s", r.raw)
	}

	// Holding nothing now: renew answers the definite empty list, remove 0.
	r = h.post("/v1/leases/renew", `{"requester":`+who+`}`).ok(t)
	if !strings.Contains(string(r.raw), `"leases":[]`) || len(r.leases(t)) != 0 {
		t.Fatalf("renew after remove: %s", r.raw)
	}
	if h.post("/v1/leases/remove", `{"requester":`+who+`}`).ok(t).num("removed") != 0 {
		t.Fatal("second remove removed something")
	}
}

func firstLease(r response) any { return r.body["leases"].([]any)[0] }

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// assertKeys checks that a JSON object has exactly the given members.
func assertKeys(t *testing.T, raw []byte, want ...string) {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	var got []string
	for k := range m {
		got = append(got, k)
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("members %v, want %v: %s", got, want, raw)
	}
}

func assertCounts(t *testing.T, r response, total, remaining, leased, inGrace, quarantined int64) {
	t.Helper()
	got := []int64{r.num("total"), r.num("remaining"), r.num("leased"), r.num("inGrace"), r.num("quarantined")}
	if want := []int64{total, remaining, leased, inGrace, quarantined}; !slices.Equal(got, want) {
		t.Fatalf("counts (total, remaining, leased, inGrace, quarantined) = %v, want %v", got, want)
	}
}

func TestVersionAndHealth(t *testing.T) {
	h := newBolt(t, withOptions(func(o *idkhttp.Options) {
		o.AllowedIPs = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	}))
	// No API key and an address outside the allow-list: /v1/version answers anyway.
	r := h.get("/v1/version", "X-API-Key", "").ok(t)
	assertKeys(t, r.raw, "version", "commit", "layout", "nodeRange")
	if r.str("version") != "v1.2.3" || r.str("commit") != "abc123" || !strings.Contains(string(r.raw), `"nodeRange":{"first":0,"last":4095}`) {
		t.Fatalf("version: %s", r.raw)
	}
	if r := h.call(http.MethodHead, "/v1/version", ""); r.status != 200 || len(r.raw) != 0 {
		t.Fatalf("HEAD: %d %q", r.status, r.raw)
	}
	if h.get("/livez", "X-API-Key", "").ok(t).str("status") != "ok" {
		t.Fatal("livez")
	}
	if h.get("/readyz", "X-API-Key", "").ok(t).str("status") != "ready" {
		t.Fatal("readyz")
	}
}

func TestAPIKey(t *testing.T) {
	h := newBolt(t)
	routes := []struct{ method, path, body string }{
		{"POST", "/v1/leases", `{"requester":` + requesterJSON(1) + `,"count":1}`},
		{"POST", "/v1/leases/renew", `{"requester":` + requesterJSON(1) + `}`},
		{"POST", "/v1/leases/remove", `{"requester":` + requesterJSON(1) + `}`},
		{"GET", "/v1/leases/remaining", ""},
	}
	past := h.clk.Now().Add(-time.Hour) // the registry's clock
	const expired = "idk_expired-key-0123456789abcdefghij"
	if err := h.store.CreateAPIKey(context.Background(), idkeeper.APIKeyFor(expired, "old", past.Add(-time.Hour), past)); err != nil {
		t.Fatal(err)
	}
	for _, rt := range routes {
		h.call(rt.method, rt.path, rt.body, "X-API-Key", "").problem(t, protocol.CodeAPIKeyMissing)
		h.call(rt.method, rt.path, rt.body, "X-API-Key", "idk_not-a-key-0123456789abcdefghijkl").problem(t, protocol.CodeAPIKeyInvalid)
		r := h.call(rt.method, rt.path, rt.body, "X-API-Key", expired).problem(t, protocol.CodeAPIKeyExpired)
		if !strings.Contains(r.str("detail"), "expired") {
			t.Fatalf("detail %q", r.str("detail"))
		}
		h.call(rt.method, rt.path, rt.body).ok(t)
	}
	// Unauthenticated requests write nothing.
	leases, err := h.store.Leases(context.Background())
	if err != nil || len(leases) != 0 {
		t.Fatalf("leases %v, %v", leases, err)
	}
}

func TestAccessLogNeverShowsTheKey(t *testing.T) {
	h := newBolt(t)
	h.post("/v1/leases", `{"requester":`+requesterJSON(1)+`,"count":1}`).ok(t)
	h.get("/v1/leases/remaining", "X-API-Key", "idk_wrong-key-0123456789abcdefghijklm").problem(t, protocol.CodeAPIKeyInvalid)
	logs := h.logs.String()
	id, _ := idkeeper.HashAPIKey(testKey)
	if !strings.Contains(logs, `"msg":"http request"`) || !strings.Contains(logs, `"keyId":"`+id+`"`) || !strings.Contains(logs, `"code":"API_KEY_INVALID"`) {
		t.Fatalf("no access log with key ID and code:\n%s", logs)
	}
	if strings.Contains(logs, testKey) || strings.Contains(logs, "idk_wrong-key") {
		t.Fatalf("the API key was logged:\n%s", logs)
	}
}

func TestIPAllowList(t *testing.T) {
	only := func(prefixes ...string) option {
		return withOptions(func(o *idkhttp.Options) {
			for _, p := range prefixes {
				o.AllowedIPs = append(o.AllowedIPs, netip.MustParsePrefix(p))
			}
		})
	}
	h := newBolt(t, only("10.0.0.0/8", "fd00::/8"))
	for _, rt := range [][2]string{{"POST", "/v1/leases"}, {"POST", "/v1/leases/renew"}, {"POST", "/v1/leases/remove"}, {"GET", "/v1/leases/remaining"}} {
		// 403 comes before the API-key check: a refused address learns nothing about keys.
		r := h.call(rt[0], rt[1], `{}`, "X-API-Key", "").problem(t, protocol.CodeIPNotAllowed)
		if !strings.Contains(r.str("detail"), "127.0.0.1") {
			t.Fatalf("detail %q", r.str("detail"))
		}
	}
	h.get("/v1/version").ok(t)
	h.get("/livez").ok(t)

	newBolt(t, only("127.0.0.0/8")).get("/v1/leases/remaining").ok(t)

	// X-Forwarded-For counts only from a trusted proxy, read from the right.
	h = newBolt(t, only("203.0.113.7/32"), withOptions(func(o *idkhttp.Options) {
		o.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32"), netip.MustParsePrefix("192.0.2.0/24")}
	}))
	h.get("/v1/leases/remaining", "X-Forwarded-For", "198.51.100.1, 203.0.113.7, 192.0.2.10").ok(t)
	h.get("/v1/leases/remaining", "X-Forwarded-For", "203.0.113.7, 198.51.100.1").problem(t, protocol.CodeIPNotAllowed)
	h.get("/v1/leases/remaining").problem(t, protocol.CodeIPNotAllowed)
	untrusted := newBolt(t, only("203.0.113.7/32"))
	untrusted.get("/v1/leases/remaining", "X-Forwarded-For", "203.0.113.7").problem(t, protocol.CodeIPNotAllowed)
}

func TestBadInputWritesNothing(t *testing.T) {
	h := newBolt(t)
	who := requesterJSON(7)
	good := `{"requester":` + who + `,"count":1}`

	for _, ct := range []string{"", "text/plain", "application/x-www-form-urlencoded", "application/json; charset=latin1", "application/jsonx", "application/json;;"} {
		h.post("/v1/leases", good, "Content-Type", ct).problem(t, protocol.CodeUnsupportedMediaType)
	}
	h.post("/v1/leases/renew", `{"requester":`+who+`}`, "Content-Type", "text/json").problem(t, protocol.CodeUnsupportedMediaType)

	big := `{"requester":` + who + `,"count":1,"x":"` + strings.Repeat("a", 64<<10) + `"}`
	h.post("/v1/leases", big).problem(t, protocol.CodeBodyTooLarge)
	// Without a Content-Length (chunked) the limit holds while reading.
	req, _ := http.NewRequest("POST", h.baseURL+"/v1/leases", io.MultiReader(strings.NewReader(big)))
	req.Header.Set("X-API-Key", testKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := h.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("chunked big body: %d", resp.StatusCode)
	}

	cases := []struct{ path, body, field string }{
		{"/v1/leases", `{"requester":` + who + `,"count":1`, "body"},
		{"/v1/leases", `not json`, "body"},
		{"/v1/leases", good + `{}`, "body"},
		{"/v1/leases", `{"requester":` + who + `,"count":1,"priority":9}`, "priority"},
		{"/v1/leases", `{"requester":` + who + `,"count":0}`, "count"},
		{"/v1/leases", `{"requester":{"machineId":"","pid":1,"startedAt":"2026-03-01T09:00:00Z"},"count":1}`, "requester.machineId"},
		{"/v1/leases", `{"requester":{"machineId":"a","pid":0,"startedAt":"2026-03-01T09:00:00Z"},"count":1}`, "requester.pid"},
		{"/v1/leases", `{"requester":{"machineId":"a","pid":1,"startedAt":"March 1st"},"count":1}`, "requester.startedAt"},
		{"/v1/leases", `{"requester":` + who + `,"count":1,"clientUtcNow":"now"}`, "clientUtcNow"},
		{"/v1/leases/renew", `{"requester":` + who + `,"fencingTokens":[-1]}`, "fencingTokens[0]"},
		{"/v1/leases/renew", `{"requester":` + who + `,"clientUtcNow":"2026-02-30T00:00:00Z"}`, "clientUtcNow"},
		{"/v1/leases/remove", `{"requester":` + who + `,"mintedUpTo":12}`, "mintedUpTo"},
		{"/v1/leases/remove", `{"count":1}`, "count"},
		{"/v1/leases/remove", ``, "body"},
	}
	for _, c := range cases {
		r := h.post(c.path, c.body, "Content-Type", "application/json").problem(t, protocol.CodeInvalidRequest)
		if r.str("field") != c.field {
			t.Errorf("%s %s: field %q, want %q (%s)", c.path, c.body, r.str("field"), c.field, r.str("detail"))
		}
	}
	// A count above 4096, or above what the pool holds, is COUNT_TOO_LARGE (the
	// gateway's code for a count above its limit too), with the most allowed.
	small := newBolt(t, withConfig(func(c *idkeeper.Config) { c.Nodes = 3 }))
	for _, c := range []struct {
		h    *harness
		body string
		most int64
	}{{h, `{"requester":` + who + `,"count":4097}`, 4096}, {h, `{"requester":` + who + `,"count":99999999999}`, 4096}, {small, `{"requester":` + who + `,"count":4}`, 3}} {
		r := c.h.post("/v1/leases", c.body).problem(t, protocol.CodeCountTooLarge)
		if r.str("field") != "count" || r.num("maxCount") != c.most {
			t.Fatalf("%s: %s; want field count, maxCount %d", c.body, r.raw, c.most)
		}
	}

	ctx := context.Background()
	leases, err := h.store.Leases(ctx)
	if err != nil || len(leases) != 0 {
		t.Fatalf("leases after bad input: %v, %v", leases, err)
	}
	skews, err := h.store.SkewObservations(ctx)
	if err != nil || len(skews) != 0 {
		t.Fatalf("skew observations after bad input: %v, %v", skews, err)
	}
	assertCounts(t, h.get("/v1/leases/remaining").ok(t), 4096, 4096, 0, 0, 0)
	// charset=utf-8 is fine, in any case.
	h.post("/v1/leases", good, "Content-Type", "application/json; charset=UTF-8").ok(t)
}

func TestClockSkew(t *testing.T) {
	h := newBolt(t)
	behind := func(pid int, d time.Duration) string {
		return `{"requester":` + requesterJSON(pid) + `,"count":1,"clientUtcNow":"` + ts(start.Add(-d)) + `"}`
	}
	r := h.post("/v1/leases", behind(1, 11*time.Minute)).problem(t, protocol.CodeClockSkewTooLarge)
	if r.num("skewMs") != 660000 || r.num("thresholdMs") != 600000 || !strings.Contains(r.str("action"), "NTP") || !strings.Contains(r.str("detail"), "NTP") {
		t.Fatalf("skew problem: %s", r.raw)
	}
	assertCounts(t, h.get("/v1/leases/remaining").ok(t), 4096, 4096, 0, 0, 0)

	// Inside the grace period: granted (and logged). A client ahead is never refused.
	h.post("/v1/leases", behind(1, 9*time.Minute)).ok(t)
	h.post("/v1/leases", behind(2, -2*time.Hour)).ok(t)
	// Renew is never refused for skew.
	h.post("/v1/leases/renew", `{"requester":`+requesterJSON(1)+`,"clientUtcNow":"`+ts(start.Add(-2*time.Hour))+`"}`).ok(t)

	// With no grace period, skew is only logged.
	ng := newBolt(t, withConfig(func(c *idkeeper.Config) { c.Grace = idkeeper.NoGrace }))
	ng.post("/v1/leases", behind(1, 3*time.Hour)).ok(t)
}

func TestConflicts(t *testing.T) {
	h := newBolt(t, withConfig(func(c *idkeeper.Config) { c.Nodes = 3 }))
	alloc := func(pid, n int) response {
		return h.post("/v1/leases", fmt.Sprintf(`{"requester":%s,"count":%d}`, requesterJSON(pid), n))
	}
	alloc(1, 2).ok(t)
	r := alloc(1, 3).problem(t, protocol.CodeRequesterCountMismatch)
	if r.num("held") != 2 || r.num("requested") != 3 {
		t.Fatalf("mismatch body: %s", r.raw)
	}
	r = alloc(2, 2).problem(t, protocol.CodeNodeIDsExhausted)
	if r.num("requested") != 2 || r.num("remaining") != 1 {
		t.Fatalf("exhausted body: %s", r.raw)
	}
	alloc(2, 1).ok(t)
	alloc(3, 1).problem(t, protocol.CodeNodeIDsExhausted)
	assertCounts(t, h.get("/v1/leases/remaining").ok(t), 3, 0, 3, 0, 0)
}

func TestNotFoundAndMethodNotAllowed(t *testing.T) {
	h := newBolt(t)
	for _, p := range []string{"/", "/nope", "/v1", "/v1/leases/", "/v1/leases/17", "/v2/leases"} {
		h.get(p).problem(t, protocol.CodeNotFound)
	}
	for _, c := range []struct{ method, path, allow string }{
		{"GET", "/v1/leases", "POST"},
		{"PUT", "/v1/leases/renew", "POST"},
		{"DELETE", "/v1/leases/remove", "POST"},
		{"POST", "/v1/leases/remaining", "GET, HEAD"},
		{"POST", "/v1/version", "GET, HEAD"},
		{"POST", "/livez", "GET, HEAD"},
	} {
		r := h.call(c.method, c.path, "").problem(t, protocol.CodeMethodNotAllowed)
		if got := r.header.Get("Allow"); got != c.allow {
			t.Errorf("%s %s: Allow %q, want %q", c.method, c.path, got, c.allow)
		}
	}
}

func TestStoreDown(t *testing.T) {
	stores(t, func(t *testing.T, h *harness) {
		h.post("/v1/leases", `{"requester":`+requesterJSON(1)+`,"count":1}`).ok(t)
		if h.redis != nil {
			h.redis.Stop(t)
		} else {
			_ = h.store.Close()
		}
		h.post("/v1/leases", `{"requester":`+requesterJSON(2)+`,"count":1}`).problem(t, protocol.CodeStoreUnavailable)
		h.post("/v1/leases/renew", `{"requester":`+requesterJSON(1)+`}`).problem(t, protocol.CodeStoreUnavailable)
		h.get("/v1/leases/remaining").problem(t, protocol.CodeStoreUnavailable)
		h.get("/readyz").problem(t, protocol.CodeNotReady)
		h.get("/livez").ok(t)
		h.get("/v1/version").ok(t)
		if m := h.get("/metrics"); m.status != 200 || !strings.Contains(string(m.raw), "idkeeper_store_up 0") {
			t.Fatalf("metrics with the store down: %d\n%s", m.status, m.raw)
		}
		// The cause stays in the server's log, not in the answer.
		if r := h.get("/v1/leases/remaining"); strings.Contains(string(r.raw), "closed") || strings.Contains(string(r.raw), "refused") {
			t.Fatalf("problem leaks the cause: %s", r.raw)
		}
	})
}

// Issue #8 item 8 over HTTP: a bare fencing token, however high, and a receipt
// that does not verify are no evidence: nothing is quarantined, the counters say
// what was ignored. Out-of-range tokens are refused with 400.
func TestUnverifiedEvidenceIsIgnored(t *testing.T) {
	h := newBolt(t)
	who := requesterJSON(1)
	a := h.post("/v1/leases", `{"requester":`+who+`,"count":2}`).ok(t)
	receipt := a.leases(t)[0].Receipt
	if len(receipt) != 60 {
		t.Fatalf("receipt %q", receipt)
	}
	r := h.post("/v1/leases/renew", `{"requester":`+who+`,"fencingTokens":[9007199254740991]}`).ok(t)
	if len(r.leases(t)) != 2 {
		t.Fatalf("renew: %s", r.raw)
	}
	forged := receipt[:20] + "AAAA" + receipt[24:]
	h.post("/v1/leases/renew", `{"requester":`+requesterJSON(2)+`,"receipts":["`+receipt+`","`+forged+`"]}`).ok(t)
	assertCounts(t, h.get("/v1/leases/remaining").ok(t), 4096, 4094, 2, 0, 0)
	if v := metricValue(t, h, "idkeeper_store_resets_total", "new_generation", "true"); v != 0 {
		t.Fatalf("idkeeper_store_resets_total = %v", v)
	}
	if v := metricValue(t, h, "idkeeper_renew_evidence_total", "kind", "bare_token"); v != 1 {
		t.Fatalf("bare tokens counted %v", v)
	}
	if v := metricValue(t, h, "idkeeper_renew_evidence_total", "kind", "bad_receipt"); v != 2 {
		t.Fatalf("bad receipts counted %v", v)
	}
	h.post("/v1/leases/renew", `{"requester":`+who+`,"fencingTokens":[18446744073709551615]}`).problem(t, protocol.CodeInvalidRequest)
}

// Issue #8 item 3 over HTTP: another API key can neither renew nor remove a lease,
// and its forged mintedUpTo changes nothing.
func TestLeaseNotOwned(t *testing.T) {
	stores(t, func(t *testing.T, h *harness) {
		const other = "idk_another-tenant-0123456789abcdefgh"
		if _, err := h.reg.EnsureAPIKey(t.Context(), other, "other"); err != nil {
			t.Fatal(err)
		}
		who := requesterJSON(1)
		g := h.post("/v1/leases", `{"requester":`+who+`,"count":1}`).ok(t)
		node := idkeeper.NodeID(g.leases(t)[0].NodeID)
		before, _ := h.store.Node(t.Context(), node)
		for _, c := range []struct{ path, body string }{
			{"/v1/leases/remove", `{"requester":` + who + `,"mintedUpTo":"2026-01-01T00:00:00Z"}`},
			{"/v1/leases/renew", `{"requester":` + who + `}`},
			{"/v1/leases", `{"requester":` + who + `,"count":1}`},
		} {
			r := h.call("POST", c.path, c.body, "X-API-Key", other)
			r.problem(t, protocol.CodeLeaseNotOwned)
			if strings.Contains(string(r.raw), "test") {
				t.Fatalf("the problem names the owner: %s", r.raw)
			}
		}
		after, _ := h.store.Node(t.Context(), node)
		if after.Lease == nil || !after.Watermark.Equal(before.Watermark) {
			t.Fatalf("another key's calls changed the node: %+v, was %+v", after, before)
		}
		h.post("/v1/leases/remove", `{"requester":`+who+`}`).ok(t)
	})
}

// Issue #8 item 12 over HTTP: right after the store lost its data, a request with
// a valid key is answered after the recovery, never 401; the registry answers 503
// STORE_NOT_INITIALISED (with Retry-After) while it waits for init.
func TestNo401ForAKeyTheStoreLostTrack(t *testing.T) {
	h := newRedis(t)
	h.post("/v1/leases", `{"requester":`+requesterJSON(1)+`,"count":1}`).ok(t)
	h.redis.Restart(t) // no persistence: everything is gone, the API key too
	r := h.get("/v1/leases/remaining")
	if r.status == http.StatusUnauthorized {
		t.Fatalf("a valid key right after the reset: %d %s", r.status, r.raw)
	}
	assertCounts(t, r.ok(t), 4096, 0, 0, 0, 4096)

	w := newHarnessNoInit(t)
	p := w.get("/v1/leases/remaining").problem(t, protocol.CodeStoreNotInitialised)
	if p.header.Get("Retry-After") == "" || !strings.Contains(p.body["detail"].(string), "idkeeper init") {
		t.Fatalf("before init: %v %s", p.header, p.raw)
	}
	w.get("/readyz").problem(t, protocol.CodeStoreNotInitialised)
}

// TestNewServerRefusesBadOptions: a negative limit is an error naming the option,
// not silently the default; zero is the default.
func TestNewServerRefusesBadOptions(t *testing.T) {
	reg := registrytest.Start(t, registrytest.Options{}).Registry
	for setting, o := range map[string]idkhttp.Options{"MaxBodyBytes": {MaxBodyBytes: -1}, "Timeout": {Timeout: -time.Second}} {
		s, err := idkhttp.NewServer(reg, o)
		var re *idkeeper.RangeError
		if s != nil || !errors.As(err, &re) || re.Setting != setting {
			t.Errorf("%s: %v, %v; want a RangeError", setting, s, err)
		}
	}
	if _, err := idkhttp.NewServer(reg, idkhttp.Options{Gatherer: prometheus.NewRegistry()}); err != nil {
		t.Fatal(err)
	}
}
