package http_test

import (
	"context"
	"encoding/json"
	"math"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper"
	idkhttp "github.com/idkeeper/idkeeper/http"
	"github.com/idkeeper/idkeeper/internal/wire"
)

const adminKey = "idk_admin-key-for-the-http-tests-0123456789"

// withAdminKey stores adminKey as the environment's admin key.
func (h *harness) withAdminKey() *harness {
	h.t.Helper()
	if _, _, err := h.reg.EnsureAdminKey(context.Background(), adminKey); err != nil {
		h.t.Fatal(err)
	}
	return h
}

func (h *harness) admin(method, path, body string) response {
	h.t.Helper()
	return h.call(method, path, body, "X-API-Key", adminKey)
}

// The admin API on both stores: an admin key creates a key (secret once, 201,
// Location), lists and reads keys without secrets or hashes, revokes one; the new
// key allocates on /v1 until it is revoked.
func TestAdminKeys(t *testing.T) {
	stores(t, func(t *testing.T, h *harness) {
		h.withAdminKey()
		r := h.admin("POST", "/admin/api/keys", `{"description":"billing","expiresIn":"720h","maxNodes":2}`)
		if r.status != 201 || r.header.Get("Cache-Control") != "no-store" {
			t.Fatalf("create: %d %s", r.status, r.raw)
		}
		var made wire.CreateAPIKeyResponse
		if err := json.Unmarshal(r.raw, &made); err != nil || !strings.HasPrefix(made.Secret, idkeeper.APIKeyPrefix) {
			t.Fatalf("create answered %s", r.raw)
		}
		id, _ := idkeeper.HashAPIKey(made.Secret)
		k := made.Key
		if k.ID != id || k.Description != "billing" || k.Status != "active" || k.Admin || k.MaxNodes != 2 ||
			k.ExpiresAt == nil || *k.ExpiresAt != ts(start.Add(720*time.Hour)) || k.LastUsedAt != nil || k.RevokedAt != nil {
			t.Fatalf("created key %+v", k)
		}
		if loc := r.header.Get("Location"); loc != "/admin/api/keys/"+id {
			t.Fatalf("Location %q", loc)
		}

		who := requesterJSON(1)
		h.call("POST", "/v1/leases", `{"requester":`+who+`,"count":2}`, "X-API-Key", made.Secret).ok(t)

		r = h.admin("GET", "/admin/api/keys", "").ok(t)
		if strings.Contains(string(r.raw), made.Secret) || strings.Contains(string(r.raw), "hash") {
			t.Fatalf("the list shows a secret or a hash: %s", r.raw)
		}
		var list wire.APIKeyList
		if err := json.Unmarshal(r.raw, &list); err != nil || len(list.Keys) != 3 {
			t.Fatalf("list: %s", r.raw)
		}
		r = h.admin("GET", "/admin/api/keys/"+id, "").ok(t)
		var got wire.APIKey
		if err := json.Unmarshal(r.raw, &got); err != nil || got.ID != id || got.NodesHeld != 2 {
			t.Fatalf("get: %s", r.raw)
		}

		r = h.admin("POST", "/admin/api/keys/"+id+"/revoke", "").ok(t)
		var rev wire.RevokeAPIKeyResponse
		if err := json.Unmarshal(r.raw, &rev); err != nil || rev.AlreadyRevoked || rev.Key.Status != "revoked" ||
			rev.Key.RevokedAt == nil || rev.Key.NodesHeld != 2 {
			t.Fatalf("revoke: %s", r.raw)
		}
		h.call("GET", "/v1/leases/remaining", "", "X-API-Key", made.Secret).problem(t, idkeeper.CodeAPIKeyInvalid)
		h.clk.Advance(time.Minute)
		r = h.admin("POST", "/admin/api/keys/"+id+"/revoke", "").ok(t)
		if err := json.Unmarshal(r.raw, &rev); err != nil || !rev.AlreadyRevoked || *rev.Key.RevokedAt != ts(start) {
			t.Fatalf("revoke again: %s", r.raw)
		}
		h.admin("POST", "/admin/api/keys/nope/revoke", "").problem(t, idkeeper.CodeNotFound)
		h.admin("GET", "/admin/api/keys/nope", "").problem(t, idkeeper.CodeNotFound)

		// An admin key made through the API is one.
		r = h.admin("POST", "/admin/api/keys", `{"description":"ops","admin":true,"expiresAt":"2027-01-01T00:00:00Z"}`)
		if err := json.Unmarshal(r.raw, &made); r.status != 201 || err != nil || !made.Key.Admin || *made.Key.ExpiresAt != "2027-01-01T00:00:00.000Z" {
			t.Fatalf("create an admin key: %d %s", r.status, r.raw)
		}
		h.call("GET", "/admin/api/keys", "", "X-API-Key", made.Secret).ok(t)
	})
}

// Who may call the admin API: an admin key; not a /v1 key (403
// ADMIN_KEY_REQUIRED), no key, an unknown key (401), nor an address off the
// allow-list (403 IP_NOT_ALLOWED).
func TestAdminRefuses(t *testing.T) {
	h := newBolt(t).withAdminKey()
	for _, c := range []struct {
		method, path, body string
	}{
		{"GET", "/admin/api/keys", ""},
		{"POST", "/admin/api/keys", `{"description":"x"}`},
		{"GET", "/admin/api/keys/abc", ""},
		{"POST", "/admin/api/keys/abc/revoke", ""},
	} {
		h.call(c.method, c.path, c.body).problem(t, idkeeper.CodeAdminKeyRequired)
		h.call(c.method, c.path, c.body, "X-API-Key", "").problem(t, idkeeper.CodeAPIKeyMissing)
		h.call(c.method, c.path, c.body, "X-API-Key", "idk_not-a-key-0123456789abcdefghij").problem(t, idkeeper.CodeAPIKeyInvalid)
	}
	if ks, _ := h.reg.Keys(context.Background()); len(ks) != 2 {
		t.Fatalf("a refused create made a key: %+v", ks)
	}

	far := newBolt(t, withOptions(func(o *idkhttp.Options) { o.AllowedIPs = []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")} })).withAdminKey()
	far.admin("GET", "/admin/api/keys", "").problem(t, idkeeper.CodeIPNotAllowed)
}

// Create bodies are decoded strictly, as on /v1.
func TestAdminCreateBody(t *testing.T) {
	h := newBolt(t).withAdminKey()
	for _, c := range []struct {
		body, field string
	}{
		{`{}`, "description"},
		{`{"description":"  "}`, "description"},
		{`{"description":"` + strings.Repeat("x", 201) + `"}`, "description"},
		{`{"description":"x","Description":"y"}`, "Description"},
		{`{"description":"x","description":"y"}`, "description"},
		{`{"description":"x","secret":"mine"}`, "secret"},
		{`{"description":"x","expiresIn":"soon"}`, "expiresIn"},
		{`{"description":"x","expiresIn":"-1h"}`, "expiresIn"},
		{`{"description":"x","expiresIn":"0s"}`, "expiresIn"},
		{`{"description":"x","expiresIn":"1h","expiresAt":"2027-01-01T00:00:00Z"}`, "expiresIn"},
		{`{"description":"x","expiresAt":"2026-03-01T09:00:00Z"}`, "expiresAt"},
		{`{"description":"x","maxNodes":-1}`, "maxNodes"},
		{`{"description":"x","maxNodes":1.5}`, "maxNodes"},
		{`{"description":"x","admin":"yes"}`, "admin"},
		{`{"description":7}`, "description"},
		{`[]`, "body"},
		{`{"description":"x"} {}`, "body"},
	} {
		r := h.admin("POST", "/admin/api/keys", c.body).problem(t, idkeeper.CodeInvalidRequest)
		if r.str("field") != c.field {
			t.Errorf("%s: field %q, want %q: %s", c.body, r.str("field"), c.field, r.raw)
		}
	}
	h.call("POST", "/admin/api/keys", `{"description":"x"}`, "X-API-Key", adminKey, "Content-Type", "text/plain").
		problem(t, idkeeper.CodeUnsupportedMediaType)
	if ks, _ := h.reg.Keys(context.Background()); len(ks) != 2 {
		t.Fatalf("a refused create made a key: %d keys", len(ks))
	}
}

// A request made with a key in its last 14 days carries a Warning header with the
// key's ID and expiry; earlier, and for keys that never expire, none.
func TestKeyExpiryWarningHeader(t *testing.T) {
	h := newBolt(t)
	secret, k, err := h.reg.CreateKey(context.Background(), idkeeper.KeySpec{Description: "expiring", ExpiresAt: start.Add(20 * 24 * time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if w := h.get("/v1/leases/remaining").ok(t).header.Values("Warning"); len(w) != 0 {
		t.Fatalf("a key that never expires got %q", w)
	}
	if w := h.get("/v1/leases/remaining", "X-API-Key", secret).ok(t).header.Values("Warning"); len(w) != 0 {
		t.Fatalf("20 days ahead: %q", w)
	}
	h.clk.Advance(6*24*time.Hour + time.Minute)
	// On success and on failure alike (a body the registry refuses).
	for _, r := range []response{
		h.get("/v1/leases/remaining", "X-API-Key", secret).ok(t),
		h.call("POST", "/v1/leases", `{}`, "X-API-Key", secret).problem(t, idkeeper.CodeInvalidRequest),
	} {
		w := r.header.Values("Warning")
		want := `299 idkeeper "API key ` + k.ID + ` expires at ` + ts(k.ExpiresAt) + `; create a new key and rotate to it"`
		if len(w) != 1 || w[0] != want {
			t.Fatalf("13 days ahead: Warning %q, want %q", w, want)
		}
		if id, at, ok := wire.ParseKeyExpiryWarning(w[0]); !ok || id != k.ID || !at.Equal(k.ExpiresAt) {
			t.Fatalf("ParseKeyExpiryWarning(%q) = %q, %v, %v", w[0], id, at, ok)
		}
	}
}

// idkeeper_api_key_time_to_expiry_seconds: +Inf while no key in use expires, the
// seconds to the earliest expiry of a key in use on the fake clock, negative once
// it has passed while its leases remain, +Inf again when the key is revoked; the
// exposition stays promlint-clean.
func TestKeyExpiryMetric(t *testing.T) {
	stores(t, func(t *testing.T, h *harness) {
		gauge := func() float64 {
			t.Helper()
			r := h.get("/metrics")
			if r.status != 200 {
				t.Fatalf("/metrics: %d", r.status)
			}
			lintClean(t, r.raw)
			mfs, err := h.prom.Gather()
			if err != nil {
				t.Fatal(err)
			}
			for _, mf := range mfs {
				if mf.GetName() == "idkeeper_api_key_time_to_expiry_seconds" {
					if len(mf.GetMetric()) != 1 {
						t.Fatalf("the gauge: %d series", len(mf.GetMetric()))
					}
					return mf.GetMetric()[0].GetGauge().GetValue()
				}
			}
			t.Fatal("no gauge")
			return 0
		}
		if v := gauge(); !math.IsInf(v, 1) {
			t.Fatalf("no expiring key: %v, want +Inf", v)
		}
		ctx := context.Background()
		_, idle, _ := h.reg.CreateKey(ctx, idkeeper.KeySpec{Description: "idle", ExpiresAt: start.Add(time.Hour)})
		secret, k, _ := h.reg.CreateKey(ctx, idkeeper.KeySpec{Description: "busy", ExpiresAt: start.Add(10 * 24 * time.Hour)})
		if v := gauge(); !math.IsInf(v, 1) {
			t.Fatalf("keys nobody uses: %v, want +Inf (idle key %s)", v, idle.ID)
		}
		h.call("POST", "/v1/leases", `{"requester":`+requesterJSON(7)+`,"count":1}`, "X-API-Key", secret).ok(t)
		h.clk.Advance(time.Hour)
		if v, want := gauge(), (10*24*time.Hour - time.Hour).Seconds(); v != want {
			t.Fatalf("a key in use: %v, want %v", v, want)
		}
		h.clk.Advance(10 * 24 * time.Hour) // expired; its lease is not reclaimed yet
		if v := gauge(); v != -time.Hour.Seconds() {
			t.Fatalf("an expired key that holds a lease: %v, want -3600", v)
		}
		if _, _, err := h.reg.RevokeKey(ctx, k.ID); err != nil {
			t.Fatal(err)
		}
		if v := gauge(); !math.IsInf(v, 1) {
			t.Fatalf("after revoking it: %v, want +Inf", v)
		}
	})
}
