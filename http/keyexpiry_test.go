package http_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper/apikey"
	"github.com/idkeeper/idkeeper/internal/wire"
	"github.com/idkeeper/idkeeper/protocol"
)

// A request made with a key in its last 14 days carries a Warning header with the
// key's ID and expiry; earlier, and for keys that never expire, none.
func TestKeyExpiryWarningHeader(t *testing.T) {
	h := newBolt(t)
	secret, k, err := apikey.NewAdmin(h.reg).Create(context.Background(), apikey.Spec{Description: "expiring", ExpiresAt: start.Add(20 * 24 * time.Hour)})
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
		h.call("POST", "/v1/leases", `{}`, "X-API-Key", secret).problem(t, protocol.CodeInvalidRequest),
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
		_, idle, _ := apikey.NewAdmin(h.reg).Create(ctx, apikey.Spec{Description: "idle", ExpiresAt: start.Add(time.Hour)})
		secret, k, _ := apikey.NewAdmin(h.reg).Create(ctx, apikey.Spec{Description: "busy", ExpiresAt: start.Add(10 * 24 * time.Hour)})
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
		if _, _, err := apikey.NewAdmin(h.reg).Revoke(ctx, k.ID); err != nil {
			t.Fatal(err)
		}
		if v := gauge(); !math.IsInf(v, 1) {
			t.Fatalf("after revoking it: %v, want +Inf", v)
		}
	})
}
