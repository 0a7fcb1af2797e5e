package idkeeper_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/apikey"
	"github.com/idkeeper/idkeeper/protocol"
)

// wantInvalid checks that err is an INVALID_REQUEST Error naming field.
func wantInvalid(t *testing.T, err error, field, what string) {
	t.Helper()
	var ie *idkeeper.Error
	if !errors.As(err, &ie) || ie.Code != protocol.CodeInvalidRequest || ie.Field != field {
		t.Fatalf("%s = %v, want INVALID_REQUEST on %s", what, err, field)
	}
}

// UpdateKey sets a key's expiry and quota, to the millisecond, and logs it; it
// refuses an expiry that is not in the future and a quota outside 0..the layout's
// node IDs, changing nothing; a quota below the node IDs held takes none away and
// only refuses new Allocs; an unknown key is NOT_FOUND, a revoked one CONFLICT.
func TestUpdateKey(t *testing.T) {
	e := newEnv(t, idkeeper.Config{})
	ctx := context.Background()
	now := e.clk.Now()
	secret, k, err := apikey.NewAdmin(e.reg).Create(ctx, apikey.Spec{Description: "svc", ExpiresAt: now.Add(time.Hour), MaxNodes: 3,
		CreatedBy: idkeeper.CreatedByUser("ann")})
	if err != nil || k.CreatedBy != "user:ann" {
		t.Fatalf("CreateKey = %+v, %v", k, err)
	}
	if info, err := e.reg.Key(ctx, k.ID); err != nil || info.Key.CreatedBy != "user:ann" {
		t.Fatalf("Key = %+v, %v; want CreatedBy user:ann", info, err)
	}
	if _, err := e.reg.Alloc(ctx, idkeeper.AllocRequest{Requester: who(1), Count: 2, Key: k}); err != nil {
		t.Fatal(err)
	}

	// Refused: nothing changes.
	past, sameMs, quota := now.Add(-time.Millisecond), now.Add(500*time.Microsecond), 1
	for _, c := range []struct {
		u     idkeeper.KeyUpdate
		field string
	}{
		{idkeeper.KeyUpdate{ExpiresAt: &past, MaxNodes: &quota}, "expiresAt"},
		{idkeeper.KeyUpdate{ExpiresAt: &now}, "expiresAt"},
		{idkeeper.KeyUpdate{ExpiresAt: &sameMs}, "expiresAt"},
		{idkeeper.KeyUpdate{MaxNodes: ptr(-1)}, "maxNodes"},
		{idkeeper.KeyUpdate{MaxNodes: ptr(idkeeper.DefaultLayout.Nodes() + 1)}, "maxNodes"},
	} {
		_, err := apikey.NewAdmin(e.reg).Update(ctx, k.ID, c.u)
		wantInvalid(t, err, c.field, "UpdateKey")
	}
	if info, err := e.reg.Key(ctx, k.ID); err != nil || info.Key.MaxNodes != 3 || !info.Key.ExpiresAt.Equal(now.Add(time.Hour)) {
		t.Fatalf("after refused updates: %+v, %v; want the key unchanged", info, err)
	}

	// A quota below the node IDs held: allowed; the leases stay, a new Alloc fails.
	info, err := apikey.NewAdmin(e.reg).Update(ctx, k.ID, idkeeper.KeyUpdate{MaxNodes: &quota})
	if err != nil || info.Key.MaxNodes != 1 || info.NodesHeld != 2 || !info.Key.ExpiresAt.Equal(now.Add(time.Hour)) ||
		info.Key.CreatedBy != "user:ann" {
		t.Fatalf("UpdateKey(quota 1) = %+v, %v", info, err)
	}
	if logs := e.logs.String(); !strings.Contains(logs, "level=WARN") || !strings.Contains(logs, "API key updated") ||
		!strings.Contains(logs, "keyId="+k.ID) || !strings.Contains(logs, "maxNodes=1") || !strings.Contains(logs, "nodesHeld=2") ||
		strings.Contains(logs, secret) {
		t.Fatalf("the log of a quota below the holdings:\n%s", logs)
	}
	authed, err := e.reg.Authenticate(ctx, secret)
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.reg.Alloc(ctx, idkeeper.AllocRequest{Requester: who(2), Count: 1, Key: authed})
	if code := protocol.ErrorCode(err); code != protocol.CodeAPIKeyQuotaExceeded {
		t.Fatalf("Alloc over the lowered quota = %v, want API_KEY_QUOTA_EXCEEDED", err)
	}
	if held, err := e.reg.Key(ctx, k.ID); err != nil || held.NodesHeld != 2 {
		t.Fatalf("after lowering the quota: %+v, %v; want the 2 node IDs still held", held, err)
	}

	// Expiry to the millisecond; then never; the quota cleared.
	later := now.Add(48*time.Hour + 1500*time.Microsecond)
	info, err = apikey.NewAdmin(e.reg).Update(ctx, k.ID, idkeeper.KeyUpdate{ExpiresAt: &later})
	if err != nil || !info.Key.ExpiresAt.Equal(protocol.Millis(later)) || info.Key.MaxNodes != 1 {
		t.Fatalf("UpdateKey(expiry) = %+v, %v", info, err)
	}
	if !strings.Contains(e.logs.String(), "expiresAt="+protocol.Millis(later).Format(time.RFC3339Nano)) {
		t.Fatalf("the log of a new expiry:\n%s", e.logs.String())
	}
	never := time.Time{}
	info, err = apikey.NewAdmin(e.reg).Update(ctx, k.ID, idkeeper.KeyUpdate{ExpiresAt: &never, MaxNodes: ptr(0)})
	if err != nil || !info.Key.ExpiresAt.IsZero() || info.Key.MaxNodes != 0 {
		t.Fatalf("UpdateKey(never, no quota) = %+v, %v", info, err)
	}
	if authed, err = e.reg.Authenticate(ctx, secret); err != nil {
		t.Fatal(err)
	}
	if _, err := e.reg.Alloc(ctx, idkeeper.AllocRequest{Requester: who(2), Count: 1, Key: authed}); err != nil {
		t.Fatalf("Alloc once the quota is cleared: %v", err)
	}
	e.clk.Advance(1000 * day)
	if _, err := e.reg.Authenticate(ctx, secret); err != nil {
		t.Fatalf("a key that never expires, 1000 days on: %v", err)
	}

	if _, err := apikey.NewAdmin(e.reg).Update(ctx, "nope", idkeeper.KeyUpdate{MaxNodes: &quota}); protocol.ErrorCode(err) != protocol.CodeNotFound {
		t.Fatalf("UpdateKey(nope) = %v, want NOT_FOUND", err)
	}

	// A revoked key stays as it was.
	if _, _, err := apikey.NewAdmin(e.reg).Revoke(ctx, k.ID); err != nil {
		t.Fatal(err)
	}
	soon := e.clk.Now().Add(time.Hour)
	_, err = apikey.NewAdmin(e.reg).Update(ctx, k.ID, idkeeper.KeyUpdate{ExpiresAt: &soon, MaxNodes: &quota})
	if code := protocol.ErrorCode(err); code != protocol.CodeConflict || !strings.Contains(err.Error(), "revoked") {
		t.Fatalf("UpdateKey of a revoked key = %v, want CONFLICT", err)
	}
	if info, err := e.reg.Key(ctx, k.ID); err != nil || !info.Key.Revoked() || !info.Key.ExpiresAt.IsZero() || info.Key.MaxNodes != 0 {
		t.Fatalf("a revoked key after UpdateKey: %+v, %v; want it unchanged", info, err)
	}
}

// The keys of the environment tell that they come from it; a failing store is
// STORE_UNAVAILABLE.
func TestUpdateKey_EnvAndStoreUnavailable(t *testing.T) {
	e := newEnv(t, idkeeper.Config{})
	ctx := context.Background()
	const boot = "idk_bootstrap-key-0123456789abcdef"
	if _, _, err := e.reg.EnsureBootstrapKey(ctx, boot); err != nil {
		t.Fatal(err)
	}
	k, err := e.reg.Authenticate(ctx, boot)
	if err != nil || k.CreatedBy != idkeeper.CreatedByEnv {
		t.Fatalf("the bootstrap key: %+v, %v; want CreatedBy %q", k, err, idkeeper.CreatedByEnv)
	}
	e.store.Close()
	if _, err := apikey.NewAdmin(e.reg).Update(ctx, k.ID, idkeeper.KeyUpdate{MaxNodes: ptr(2)}); protocol.ErrorCode(err) != protocol.CodeStoreUnavailable {
		t.Fatalf("UpdateKey on a closed store = %v, want STORE_UNAVAILABLE", err)
	}
}
