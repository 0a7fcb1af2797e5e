package idkeeper_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/apikey"
	"github.com/idkeeper/idkeeper/protocol"
)

const day = 24 * time.Hour

// keyEnv stores keys described by name on a registry env and remembers them.
type keyEnv struct {
	*env
	t       *testing.T
	keys    map[string]idkeeper.APIKey
	secrets []string
	seen    int // how much of the log expectLogged has read
	pid     int
}

func newKeyEnv(t *testing.T) *keyEnv {
	return &keyEnv{env: newEnv(t, idkeeper.Config{}), t: t, keys: map[string]idkeeper.APIKey{}}
}

// add stores a key named name that expires at expires (zero: never), allocates a
// node ID with it when holding, and records a use at used (zero: none).
func (e *keyEnv) add(name string, expires time.Time, holding bool, used time.Time) idkeeper.APIKey {
	e.t.Helper()
	ctx := context.Background()
	secret, k := idkeeper.NewAPIKey("the "+name+" service", e.clk.Now(), expires)
	if err := e.store.CreateAPIKey(ctx, k); err != nil {
		e.t.Fatal(err)
	}
	if holding {
		e.pid++
		if _, err := e.reg.Alloc(ctx, idkeeper.AllocRequest{Requester: who(e.pid), Count: 1, Key: k}); err != nil {
			e.t.Fatal(err)
		}
	}
	if !used.IsZero() {
		if err := e.store.TouchAPIKey(ctx, k.ID, used); err != nil {
			e.t.Fatal(err)
		}
	}
	e.keys[name] = k
	e.secrets = append(e.secrets, secret)
	return k
}

// expectLogged checks the log lines written since the last call: a warning for
// each key of warned, an error for each key of expired, nothing about the others.
func (e *keyEnv) expectLogged(n int, err error, warned, expired []string) {
	e.t.Helper()
	all := e.logs.String()
	fresh := all[e.seen:]
	e.seen = len(all)
	if err != nil || n != len(warned)+len(expired) {
		e.t.Fatalf("WarnExpiringKeys = %d, %v; want %d\n%s", n, err, len(warned)+len(expired), fresh)
	}
	for _, s := range e.secrets {
		if strings.Contains(fresh, s) {
			e.t.Fatal("a key's secret went to the log")
		}
	}
	for name, k := range e.keys {
		var line string
		for l := range strings.Lines(fresh) {
			if strings.Contains(l, "keyId="+k.ID) && strings.Contains(l, "an API key in use") {
				line = l
			}
		}
		switch {
		case slices.Contains(warned, name):
			if !strings.Contains(line, "level=WARN") || !strings.Contains(line, "expires soon") ||
				!strings.Contains(line, `description="the `+name+` service"`) || !strings.Contains(line, "expiresAt="+k.ExpiresAt.Format(time.RFC3339)) {
				e.t.Fatalf("key %s: want a warning, got %q\n%s", name, line, fresh)
			}
		case slices.Contains(expired, name):
			if !strings.Contains(line, "level=ERROR") || !strings.Contains(line, "has expired") {
				e.t.Fatalf("key %s: want an error, got %q\n%s", name, line, fresh)
			}
		case line != "":
			e.t.Fatalf("key %s: want nothing logged, got %q", name, line)
		}
	}
}

// Keys in use that expire within 14 days are warned about once a day, expired
// ones still in use as errors; idle, revoked and never-expiring keys never; the
// check runs on the fake clock and the day is the store's job lock.
func TestWarnExpiringKeys_Daily(t *testing.T) {
	e := newKeyEnv(t)
	ctx := context.Background()
	now := e.clk.Now()
	e.add("soon", now.Add(10*day), true, time.Time{})
	e.add("later", now.Add(20*day), true, time.Time{})
	e.add("used", now.Add(12*day), false, now.Add(-47*time.Hour)) // used within lease + grace: in use
	e.add("stale", now.Add(2*day), false, now.Add(-49*time.Hour)) // last used before: not in use
	e.add("idle", now.Add(5*day), false, time.Time{})
	revoked := e.add("revoked", now.Add(3*day), true, now)
	if err := e.store.RevokeAPIKey(ctx, revoked.ID, now); err != nil {
		t.Fatal(err)
	}
	e.add("forever", time.Time{}, true, now)
	// Expired an hour ago; its holder's lease is still there.
	e.add("expired", now.Add(-time.Hour), true, time.Time{})

	keys, at, err := e.reg.ExpiringKeys(ctx)
	if err != nil || !at.Equal(now) {
		t.Fatalf("ExpiringKeys: %v at %v", err, at)
	}
	var got []string
	for _, k := range keys {
		got = append(got, strings.TrimSuffix(strings.TrimPrefix(k.Key.Description, "the "), " service"))
	}
	if want := []string{"expired", "soon", "used", "later"}; !slices.Equal(got, want) {
		t.Fatalf("ExpiringKeys = %v, want %v (earliest first, keys in use only)", got, want)
	}

	n, err := e.reg.WarnExpiringKeys(ctx)
	e.expectLogged(n, err, []string{"soon", "used"}, []string{"expired"})
	// Within the day: nothing again.
	e.clk.Advance(23 * time.Hour)
	n, err = e.reg.WarnExpiringKeys(ctx)
	e.expectLogged(n, err, nil, nil)
	// A day after the first: again. "used" is no longer in use (last use > 48h10m ago).
	e.clk.Advance(time.Hour)
	n, err = e.reg.WarnExpiringKeys(ctx)
	e.expectLogged(n, err, []string{"soon"}, []string{"expired"})
	// "later" enters its 14 days at day 6.
	e.clk.Set(now.Add(6*day + time.Minute))
	n, err = e.reg.WarnExpiringKeys(ctx)
	e.expectLogged(n, err, []string{"soon", "later"}, []string{"expired"})
	// Cleanup reclaims the leases (none was renewed): only a key used lately is in
	// use then.
	e.clk.Advance(day)
	if n, _, err := e.reg.Cleanup(ctx); err != nil || n != 5 {
		t.Fatalf("Cleanup reclaimed %d, %v; want the 5 leases", n, err)
	}
	if err := e.store.TouchAPIKey(ctx, e.keys["soon"].ID, e.clk.Now()); err != nil {
		t.Fatal(err)
	}
	n, err = e.reg.WarnExpiringKeys(ctx)
	e.expectLogged(n, err, []string{"soon"}, nil)
}

// KeyNotice announces a key's expiry from 14 days before, never for a key that
// does not expire.
func TestKeyNotice(t *testing.T) {
	e := newEnv(t, idkeeper.Config{})
	now := e.clk.Now()
	for _, c := range []struct {
		expires time.Time
		want    bool
	}{
		{time.Time{}, false},
		{now.Add(idkeeper.KeyExpiryNotice + time.Millisecond), false},
		{now.Add(idkeeper.KeyExpiryNotice), true},
		{now.Add(time.Minute), true},
	} {
		at, ok := e.reg.KeyNotice(idkeeper.APIKey{ExpiresAt: c.expires})
		if ok != c.want || (ok && !at.Equal(c.expires)) {
			t.Errorf("KeyNotice(expires %v) = %v, %v; want %v", c.expires, at, ok, c.want)
		}
	}
}

// CreateKey checks its spec; RevokeKey keeps the first revocation; Key and
// RevokeKey answer NOT_FOUND for an unknown ID.
func TestKeyAdministration(t *testing.T) {
	e := newEnv(t, idkeeper.Config{})
	ctx := context.Background()
	now := e.clk.Now()
	for _, c := range []struct {
		spec  apikey.Spec
		field string
	}{
		{apikey.Spec{Description: "  "}, "description"},
		{apikey.Spec{Description: strings.Repeat("x", apikey.MaxDescriptionLen+1)}, "description"},
		{apikey.Spec{Description: "d", ExpiresAt: now}, "expiresAt"},
		{apikey.Spec{Description: "d", MaxNodes: -1}, "maxNodes"},
		{apikey.Spec{Description: "d", MaxNodes: 4097}, "maxNodes"},
	} {
		var ie *idkeeper.Error
		if _, _, err := apikey.NewAdmin(e.reg).Create(ctx, c.spec); !errors.As(err, &ie) || ie.Code != protocol.CodeInvalidRequest || ie.Field != c.field {
			t.Errorf("CreateKey(%+v) = %v, want INVALID_REQUEST on %s", c.spec, err, c.field)
		}
	}
	secret, k, err := apikey.NewAdmin(e.reg).Create(ctx, apikey.Spec{Description: " ops ", ExpiresAt: now.Add(time.Hour), MaxNodes: 3, Admin: true})
	if err != nil || k.Description != "ops" || !k.Admin || k.MaxNodes != 3 || !k.ExpiresAt.Equal(now.Add(time.Hour)) {
		t.Fatalf("CreateKey = %+v, %v", k, err)
	}
	if got, err := e.reg.Authenticate(ctx, secret); err != nil || got.ID != k.ID || !got.Admin {
		t.Fatalf("Authenticate(new key) = %+v, %v", got, err)
	}
	info, already, err := apikey.NewAdmin(e.reg).Revoke(ctx, k.ID)
	if err != nil || already || !info.Key.RevokedAt.Equal(now) {
		t.Fatalf("RevokeKey = %+v, %v, %v", info, already, err)
	}
	e.clk.Advance(time.Minute)
	if info, already, err = apikey.NewAdmin(e.reg).Revoke(ctx, k.ID); err != nil || !already || !info.Key.RevokedAt.Equal(now) {
		t.Fatalf("RevokeKey again = %+v, %v, %v", info, already, err)
	}
	if _, _, err := apikey.NewAdmin(e.reg).Revoke(ctx, "nope"); protocol.ErrorCode(err) != protocol.CodeNotFound {
		t.Fatalf("RevokeKey(nope) = %v", err)
	}
	if _, err := e.reg.Key(ctx, "nope"); protocol.ErrorCode(err) != protocol.CodeNotFound {
		t.Fatalf("Key(nope) = %v", err)
	}
}

// The admin key of the environment is a bootstrap key that is an admin key; a new
// one retires the previous admin key and leaves the bootstrap key alone, and the
// other way round; a secret that exists as a plain key is not promoted.
func TestEnsureAdminKey(t *testing.T) {
	e := newEnv(t, idkeeper.Config{})
	ctx := context.Background()
	const boot, admin1, admin2 = "idk_bootstrap-key-0123456789abcdef", "idk_admin-key-one-0123456789abcdef", "idk_admin-key-two-0123456789abcdef"
	if _, _, err := e.reg.EnsureBootstrapKey(ctx, boot); err != nil {
		t.Fatal(err)
	}
	created, retired, err := e.reg.EnsureAdminKey(ctx, admin1)
	if err != nil || !created || len(retired) != 0 {
		t.Fatalf("EnsureAdminKey = %v, %v, %v", created, retired, err)
	}
	k, err := e.reg.Authenticate(ctx, admin1)
	if err != nil || !k.Admin || !k.Bootstrap {
		t.Fatalf("the admin key: %+v, %v", k, err)
	}
	id1 := k.ID
	if created, _, err := e.reg.EnsureAdminKey(ctx, admin1); err != nil || created {
		t.Fatalf("EnsureAdminKey again = %v, %v", created, err)
	}
	if _, retired, err = e.reg.EnsureAdminKey(ctx, admin2); err != nil || !slices.Equal(retired, []string{id1}) {
		t.Fatalf("a new admin key retired %v, %v; want the previous admin key only", retired, err)
	}
	if _, err := e.reg.Authenticate(ctx, boot); err != nil {
		t.Fatalf("the bootstrap key after a new admin key: %v", err)
	}
	if _, retired, err = e.reg.EnsureBootstrapKey(ctx, "idk_bootstrap-key-two-0123456789abc"); err != nil || len(retired) != 1 {
		t.Fatalf("a new bootstrap key retired %v, %v; want the previous bootstrap key only", retired, err)
	}
	if k, err := e.reg.Authenticate(ctx, admin2); err != nil || !k.Admin {
		t.Fatalf("the admin key after a new bootstrap key: %+v, %v", k, err)
	}
	const plain = "idk_plain-key-0123456789abcdefghij"
	if _, err := e.reg.EnsureAPIKey(ctx, plain, "plain"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.reg.EnsureAdminKey(ctx, plain); protocol.ErrorCode(err) != protocol.CodeConflict {
		t.Fatalf("EnsureAdminKey(an existing plain key) = %v, want CONFLICT", err)
	}
	if _, _, err := e.reg.EnsureAdminKey(ctx, admin1); protocol.ErrorCode(err) != protocol.CodeConflict {
		t.Fatalf("EnsureAdminKey(a retired admin key) = %v, want CONFLICT", err)
	}
}
