package storetest

import (
	"crypto/sha256"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/protocol"
)

// newKey is a key record named id, created at now by by.
func newKey(id string, now time.Time, by string) idkeeper.APIKey {
	h := sha256.Sum256([]byte("secret of " + id))
	return idkeeper.APIKey{ID: id, Hash: h[:], Description: "the " + id + " service", CreatedAt: now, CreatedBy: by}
}

// update calls UpdateAPIKey, checks that it answers want, and that the store then
// holds want too.
func (e *env) update(id string, u idkeeper.KeyUpdate, want idkeeper.APIKey, what string) {
	e.t.Helper()
	got, err := e.s.UpdateAPIKey(e.ctx, id, u)
	e.must(err, what)
	wantKey(e.t, got, want)
	got, err = e.s.APIKey(e.ctx, id)
	e.must(err, "APIKey after "+what)
	wantKey(e.t, got, want)
}

// testAPIKeyUpdate: UpdateAPIKey changes the expiry, the quota or both, to the
// millisecond; a pointer to the zero time clears the expiry; an update of nothing
// changes nothing; the other fields (LastUsedAt, RevokedAt, CreatedBy, …) and the
// other keys stay; an unknown ID is ErrNotFound; the read-modify-write loses no
// concurrent touch.
func testAPIKeyUpdate(t *testing.T, open Factory) {
	e := openEnv(t, open)
	now := e.now()
	k := newKey("ku", now, "user:ann")
	k.ExpiresAt, k.MaxNodes, k.Admin, k.Bootstrap = now.Add(24*time.Hour), 5, true, true
	other := newKey("kv", now, "cli")
	other.ExpiresAt, other.MaxNodes = now.Add(time.Hour), 2
	e.must(e.s.CreateAPIKey(e.ctx, k), "CreateAPIKey(ku)")
	e.must(e.s.CreateAPIKey(e.ctx, other), "CreateAPIKey(kv)")
	used := now.Add(time.Minute)
	e.must(e.s.TouchAPIKey(e.ctx, k.ID, used), "TouchAPIKey")
	k.LastUsedAt = used

	expiry := now.Add(48*time.Hour + 1500*time.Microsecond) // sub-millisecond: stored truncated
	k.ExpiresAt = protocol.Millis(expiry)
	e.update(k.ID, idkeeper.KeyUpdate{ExpiresAt: &expiry}, k, "UpdateAPIKey(expiry only)")

	quota := 9
	k.MaxNodes = quota
	e.update(k.ID, idkeeper.KeyUpdate{MaxNodes: &quota}, k, "UpdateAPIKey(quota only)")

	expiry2, quota2 := now.Add(72*time.Hour), 1
	k.ExpiresAt, k.MaxNodes = expiry2, quota2
	e.update(k.ID, idkeeper.KeyUpdate{ExpiresAt: &expiry2, MaxNodes: &quota2}, k, "UpdateAPIKey(both)")

	never, none := time.Time{}, 0
	k.ExpiresAt, k.MaxNodes = time.Time{}, 0
	e.update(k.ID, idkeeper.KeyUpdate{ExpiresAt: &never, MaxNodes: &none}, k, "UpdateAPIKey(never expires, no quota)")
	if k.Expired(now.Add(1000 * 24 * time.Hour)) {
		t.Fatal("a key whose expiry was cleared expires")
	}

	e.update(k.ID, idkeeper.KeyUpdate{}, k, "UpdateAPIKey(nothing)")

	if _, err := e.s.UpdateAPIKey(e.ctx, "nope", idkeeper.KeyUpdate{MaxNodes: &quota}); !errors.Is(err, idkeeper.ErrNotFound) {
		t.Fatalf("UpdateAPIKey(nope): err = %v, want ErrNotFound", err)
	}
	if _, err := e.s.APIKey(e.ctx, "nope"); !errors.Is(err, idkeeper.ErrNotFound) {
		t.Fatalf("UpdateAPIKey of an unknown ID made a key: APIKey(nope) err = %v", err)
	}
	got, err := e.s.APIKey(e.ctx, other.ID)
	e.must(err, "APIKey(kv)")
	wantKey(t, got, other)

	// A touch and an update of the same key at the same time: neither is lost.
	const rounds = 20
	var wg sync.WaitGroup
	errs := make(chan error, 2*rounds)
	wg.Go(func() {
		for i := 1; i <= rounds; i++ {
			errs <- e.s.TouchAPIKey(e.ctx, k.ID, used.Add(time.Duration(i)*time.Second))
		}
	})
	wg.Go(func() {
		for i := 1; i <= rounds; i++ {
			n := i
			_, err := e.s.UpdateAPIKey(e.ctx, k.ID, idkeeper.KeyUpdate{MaxNodes: &n})
			errs <- err
		}
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		e.must(err, "concurrent TouchAPIKey or UpdateAPIKey")
	}
	k.LastUsedAt, k.MaxNodes = used.Add(rounds*time.Second), rounds
	got, err = e.s.APIKey(e.ctx, k.ID)
	e.must(err, "APIKey after concurrent touches and updates")
	wantKey(t, got, k)
}

// testAPIKeyUpdateRevoked: UpdateAPIKey of a revoked key is ErrConflict and
// changes nothing: a revoked key's record is history.
func testAPIKeyUpdateRevoked(t *testing.T, open Factory) {
	e := openEnv(t, open)
	now := e.now()
	k := newKey("kr", now, "key:kadmin")
	k.ExpiresAt, k.MaxNodes = now.Add(time.Hour), 4
	e.must(e.s.CreateAPIKey(e.ctx, k), "CreateAPIKey")
	used, revoked := now.Add(time.Minute), now.Add(2*time.Minute)
	e.must(e.s.TouchAPIKey(e.ctx, k.ID, used), "TouchAPIKey")
	e.must(e.s.RevokeAPIKey(e.ctx, k.ID, revoked), "RevokeAPIKey")
	k.LastUsedAt, k.RevokedAt = used, revoked

	never, quota := time.Time{}, 7
	for _, u := range []idkeeper.KeyUpdate{{ExpiresAt: &never}, {MaxNodes: &quota}, {ExpiresAt: &never, MaxNodes: &quota}, {}} {
		if got, err := e.s.UpdateAPIKey(e.ctx, k.ID, u); !errors.Is(err, idkeeper.ErrConflict) {
			t.Fatalf("UpdateAPIKey(%+v) of a revoked key = %+v, %v; want ErrConflict", u, got, err)
		}
		got, err := e.s.APIKey(e.ctx, k.ID)
		e.must(err, "APIKey")
		wantKey(t, got, k)
	}
}

// testAPIKeyCreatedBy: CreatedBy round trips, "" included, and stays through a
// touch, an update and a revoke, which rewrite the record.
func testAPIKeyCreatedBy(t *testing.T, open Factory) {
	e := openEnv(t, open)
	now := e.now()
	keys := []idkeeper.APIKey{
		newKey("k1", now, "user:zoë"),
		newKey("k2", now, "key:0123456789abcdef"),
		newKey("k3", now, "cli"),
		newKey("k4", now, "env"),
		newKey("k5", now, ""),
	}
	for _, k := range keys {
		e.must(e.s.CreateAPIKey(e.ctx, k), "CreateAPIKey("+k.ID+")")
	}
	at, quota := now.Add(time.Minute), 3
	for i := range keys {
		k := &keys[i]
		e.must(e.s.TouchAPIKey(e.ctx, k.ID, at), "TouchAPIKey")
		_, err := e.s.UpdateAPIKey(e.ctx, k.ID, idkeeper.KeyUpdate{MaxNodes: &quota})
		e.must(err, "UpdateAPIKey")
		e.must(e.s.RevokeAPIKey(e.ctx, k.ID, at), "RevokeAPIKey")
		k.LastUsedAt, k.MaxNodes, k.RevokedAt = at, quota, at
	}
	ks, err := e.s.APIKeys(e.ctx)
	e.must(err, "APIKeys")
	if len(ks) != len(keys) {
		t.Fatalf("APIKeys = %+v, want %d keys", ks, len(keys))
	}
	for i := range keys {
		wantKey(t, ks[i], keys[i])
	}
}
