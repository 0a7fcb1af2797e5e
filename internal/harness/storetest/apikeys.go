package storetest

import (
	"crypto/sha256"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper"
)

// testAPIKeyAdmin: the admin mark round trips, stays through a touch and a revoke
// (which rewrite the record), and a key stored without it is no admin key.
func testAPIKeyAdmin(t *testing.T, open Factory) {
	e := openEnv(t, open)
	hash := func(s string) []byte { h := sha256.Sum256([]byte(s)); return h[:] }
	now := e.now()
	admin := idkeeper.APIKey{ID: "kadmin", Hash: hash("admin"), Description: "operators", CreatedAt: now, Admin: true, Bootstrap: true}
	plain := idkeeper.APIKey{ID: "kplain", Hash: hash("plain"), Description: "service", CreatedAt: now, MaxNodes: 3}
	e.must(e.s.CreateAPIKey(e.ctx, admin), "CreateAPIKey(admin)")
	e.must(e.s.CreateAPIKey(e.ctx, plain), "CreateAPIKey(plain)")
	for _, want := range []idkeeper.APIKey{admin, plain} {
		got, err := e.s.APIKey(e.ctx, want.ID)
		e.must(err, "APIKey")
		wantKey(t, got, want)
	}

	t1 := now.Add(time.Minute)
	e.must(e.s.TouchAPIKey(e.ctx, admin.ID, t1), "TouchAPIKey")
	e.must(e.s.RevokeAPIKey(e.ctx, admin.ID, t1.Add(time.Minute)), "RevokeAPIKey")
	admin.LastUsedAt, admin.RevokedAt = t1, t1.Add(time.Minute)
	ks, err := e.s.APIKeys(e.ctx)
	e.must(err, "APIKeys")
	if len(ks) != 2 {
		t.Fatalf("APIKeys = %+v, want 2 keys", ks)
	}
	wantKey(t, ks[0], admin)
	wantKey(t, ks[1], plain)
}
