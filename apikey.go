package idkeeper

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"time"

	"github.com/idkeeper/idkeeper/protocol"
)

// APIKeyPrefix starts every generated API key.
const APIKeyPrefix = "idk_"

// MinAPIKeyLen is the shortest API key accepted, generated or given (bootstrap).
const MinAPIKeyLen = 24

// HashAPIKey returns the lookup ID and the SHA-256 hash of a presented key. The ID is
// the hex of the hash's first 8 bytes; keys are long random strings, so a fast hash
// is the right one (a password hash would cost every request milliseconds).
func HashAPIKey(secret string) (id string, hash []byte) {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:8]), sum[:]
}

// NewAPIKey generates a random key: "idk_" and 43 base64url characters (256 bits).
// It returns the plaintext, to show once, and the record to store.
func NewAPIKey(description string, now, expiresAt time.Time) (string, APIKey) {
	var b [32]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on Linux
	secret := APIKeyPrefix + base64.RawURLEncoding.EncodeToString(b[:])
	return secret, APIKeyFor(secret, description, now, expiresAt)
}

// APIKeyFor is the record that stores secret.
func APIKeyFor(secret, description string, now, expiresAt time.Time) APIKey {
	id, hash := HashAPIKey(secret)
	return APIKey{ID: id, Hash: hash, Description: description, CreatedAt: protocol.Millis(now), ExpiresAt: expiresAt}
}

// Authenticate checks a presented X-API-Key. Errors: API_KEY_MISSING,
// API_KEY_INVALID (unknown or revoked key, compared in constant time),
// API_KEY_EXPIRED, STORE_UNAVAILABLE, and STORE_RECOVERING when the key cannot be
// found because the store lost its data: a key the registry merely cannot read yet
// is never answered 401 (DESIGN §7).
func (r *Registry) Authenticate(ctx context.Context, presented string) (APIKey, error) {
	if presented == "" {
		return APIKey{}, protocol.Errorf(protocol.CodeAPIKeyMissing, "the X-API-Key header is required")
	}
	id, hash := HashAPIKey(presented)
	sctx, end := r.trace(ctx, "store.api_key")
	k, err := r.store.APIKey(sctx, id)
	end(err)
	if errors.Is(err, ErrNotFound) {
		if err := r.confirmGeneration(ctx); err != nil {
			return APIKey{}, err
		}
		k, err = r.store.APIKey(ctx, id) // the recovery may have stored it again (bootstrap key)
	}
	if errors.Is(err, ErrNotFound) {
		return APIKey{}, protocol.Errorf(protocol.CodeAPIKeyInvalid, "the API key is not valid")
	}
	if err != nil {
		return APIKey{}, Unavailable(err)
	}
	now := r.cfg.Clock()
	switch {
	case subtle.ConstantTimeCompare(hash, k.Hash) != 1:
		return APIKey{}, protocol.Errorf(protocol.CodeAPIKeyInvalid, "the API key is not valid")
	case k.Revoked():
		return APIKey{}, protocol.Errorf(protocol.CodeAPIKeyInvalid, "the API key was revoked at %s", k.RevokedAt.UTC().Format(time.RFC3339))
	case k.Expired(now):
		return APIKey{}, protocol.Errorf(protocol.CodeAPIKeyExpired, "the API key expired at %s", k.ExpiresAt.UTC().Format(time.RFC3339))
	}
	r.touch(k.ID, now)
	return k, nil
}

// confirmGeneration checks, when a key was not found, that the store still holds
// the adopted generation; when it does not, the key may be gone with the store's
// data: the store is recovered and the caller gets STORE_RECOVERING, or nil when
// the recovery is done and the lookup may be repeated.
func (r *Registry) confirmGeneration(ctx context.Context) error {
	from := r.Generation().ID
	st, err := r.store.Status(ctx)
	if err != nil {
		return Unavailable(err)
	}
	if st.Initialised && st.Generation.ID == from {
		return nil
	}
	return r.recoverReset(ctx, "an API key lookup found the store without the adopted generation", from)
}

// touchEvery is how often a replica records a key's LastUsedAt.
const touchEvery = time.Minute

// touch records that key id was used at now, at most once a minute per key, in the
// background: a request never waits for it.
func (r *Registry) touch(id string, now time.Time) {
	if last, ok := r.touched.Load(id); ok && now.Sub(last.(time.Time)) < touchEvery {
		return
	}
	r.touched.Store(id, now)
	r.wg.Go(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := r.store.TouchAPIKey(ctx, id, now); err != nil {
			r.log.Debug("record an API key's use", "keyId", id, "err", err)
		}
	})
}

// EnsureAPIKey stores secret as a key with the given description unless a key with
// that secret exists; created tells which. A secret shorter than MinAPIKeyLen is an
// INVALID_REQUEST Error.
func (r *Registry) EnsureAPIKey(ctx context.Context, secret, description string) (created bool, err error) {
	return r.ensureKey(ctx, secret, description, false, false)
}

// EnsureBootstrapKey stores secret as the bootstrap key (APIKey.Bootstrap) unless
// it exists, and revokes every other bootstrap key that is not revoked yet and is
// not an admin key: a new IDKEEPER_BOOTSTRAP_API_KEY retires the previous one. A
// bootstrap key that was revoked (retired by a newer one) is not brought back: the
// error says so, and retires nothing. created tells whether the key was stored;
// retired lists the IDs of the keys revoked.
func (r *Registry) EnsureBootstrapKey(ctx context.Context, secret string) (created bool, retired []string, err error) {
	return r.ensureEnvKey(ctx, secret, false)
}

// EnsureAdminKey is EnsureBootstrapKey for the admin key of the environment
// (IDKEEPER_ADMIN_API_KEY): it stores secret as a bootstrap key that is an admin
// key (APIKey.Admin) unless it exists, and retires the previous such key. A key
// with that secret that exists but is not an admin key is a CONFLICT Error: keys
// are never promoted.
func (r *Registry) EnsureAdminKey(ctx context.Context, secret string) (created bool, retired []string, err error) {
	return r.ensureEnvKey(ctx, secret, true)
}

// ensureEnvKey stores a key of the environment: the bootstrap key, or the admin
// key when admin. It retires the previous key of the same kind.
func (r *Registry) ensureEnvKey(ctx context.Context, secret string, admin bool) (created bool, retired []string, err error) {
	env, desc := "IDKEEPER_BOOTSTRAP_API_KEY", "bootstrap key (IDKEEPER_BOOTSTRAP_API_KEY)"
	if admin {
		env, desc = "IDKEEPER_ADMIN_API_KEY", "admin key (IDKEEPER_ADMIN_API_KEY)"
	}
	id, _ := HashAPIKey(secret)
	if k, err := r.store.APIKey(ctx, id); err == nil && k.Revoked() {
		return false, nil, protocol.Errorf(protocol.CodeConflict, "the key %s in %s was revoked at %s (a newer key retired it, or an operator); "+
			"set the current key in %s", id, env, k.RevokedAt.UTC().Format(time.RFC3339), env)
	} else if err == nil && k.Admin != admin {
		return false, nil, protocol.Errorf(protocol.CodeConflict, "the key %s in %s exists with admin = %t; give %s a key of its own", id, env, k.Admin, env)
	}
	created, err = r.ensureKey(ctx, secret, desc, true, admin)
	if err != nil {
		return false, nil, err
	}
	keys, err := r.store.APIKeys(ctx)
	if err != nil {
		return created, nil, Unavailable(err)
	}
	now := r.cfg.Clock()
	for _, k := range keys {
		if k.Bootstrap && k.Admin == admin && !k.Revoked() && k.ID != id {
			if err := r.store.RevokeAPIKey(ctx, k.ID, now); err != nil && !errors.Is(err, ErrNotFound) {
				return created, retired, Unavailable(err)
			}
			retired = append(retired, k.ID)
		}
	}
	return created, retired, nil
}

func (r *Registry) ensureKey(ctx context.Context, secret, description string, bootstrap, admin bool) (bool, error) {
	if len(secret) < MinAPIKeyLen {
		return false, protocol.Invalidf("apiKey", "an API key must be at least %d characters long", MinAPIKeyLen)
	}
	k := APIKeyFor(secret, description, r.cfg.Clock(), time.Time{})
	k.Bootstrap, k.Admin = bootstrap, admin
	if bootstrap {
		k.CreatedBy = CreatedByEnv
	}
	if _, err := r.store.APIKey(ctx, k.ID); err == nil {
		return false, nil
	} else if !errors.Is(err, ErrNotFound) {
		return false, Unavailable(err)
	}
	if err := r.store.CreateAPIKey(ctx, k); err != nil && !errors.Is(err, ErrConflict) {
		return false, Unavailable(err)
	}
	return true, nil
}
