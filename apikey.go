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
	return APIKey{ID: id, Hash: hash, Description: description, CreatedAt: Millis(now), ExpiresAt: expiresAt}
}

// Authenticate checks a presented X-API-Key. Errors: API_KEY_MISSING,
// API_KEY_INVALID (unknown key, compared in constant time), API_KEY_EXPIRED,
// STORE_UNAVAILABLE.
func (r *Registry) Authenticate(ctx context.Context, presented string) (APIKey, error) {
	if presented == "" {
		return APIKey{}, Errorf(CodeAPIKeyMissing, "the X-API-Key header is required")
	}
	id, hash := HashAPIKey(presented)
	k, err := r.store.APIKey(ctx, id)
	if errors.Is(err, ErrNotFound) {
		return APIKey{}, Errorf(CodeAPIKeyInvalid, "the API key is not valid")
	}
	if err != nil {
		return APIKey{}, Unavailable(err)
	}
	if subtle.ConstantTimeCompare(hash, k.Hash) != 1 {
		return APIKey{}, Errorf(CodeAPIKeyInvalid, "the API key is not valid")
	}
	if k.Expired(r.cfg.Clock()) {
		return APIKey{}, Errorf(CodeAPIKeyExpired, "the API key expired at %s", k.ExpiresAt.UTC().Format(time.RFC3339))
	}
	return k, nil
}

// EnsureAPIKey stores secret as a key with the given description unless a key with
// that secret exists; created tells which. A secret shorter than MinAPIKeyLen is an
// INVALID_REQUEST Error.
func (r *Registry) EnsureAPIKey(ctx context.Context, secret, description string) (created bool, err error) {
	if len(secret) < MinAPIKeyLen {
		return false, Invalidf("apiKey", "an API key must be at least %d characters long", MinAPIKeyLen)
	}
	k := APIKeyFor(secret, description, r.cfg.Clock(), time.Time{})
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
