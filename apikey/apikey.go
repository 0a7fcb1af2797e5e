// Package apikey administers API keys: makes one from a Spec (its secret shown
// once, only its hash stored), revokes one, changes its expiry and quota. The
// functions work on a store at a given clock and pool size (the `idkeeper apikey`
// command on --store uses them); Admin does the same through a Registry, at its
// clock, under its layout's pool and with the quota that applies to each key.
//
// The key record and its secret's format, authentication and the keys a
// registry lists with their holdings stay in the root package (idkeeper.APIKey,
// Registry.Authenticate, Registry.Keys), which the registry's expiry warnings
// share.
package apikey

import (
	"context"
	"errors"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/protocol"
)

// MaxDescriptionLen bounds an API key's description, in bytes.
const MaxDescriptionLen = 200

// Spec describes a new API key.
type Spec struct {
	Description string    // what the key is for, shown to operators: required
	ExpiresAt   time.Time // zero: the key never expires
	MaxNodes    int       // the key's quota (APIKey.MaxNodes); 0: none
	Admin       bool      // the key may use the admin API (APIKey.Admin)
	CreatedBy   string    // who makes it (APIKey.CreatedBy); "": not told
}

// Create makes a random key from spec, created at now, and stores it on s. It
// returns the secret, to show once (only its hash is stored), and the record. The
// description is trimmed of surrounding space. Errors: INVALID_REQUEST naming the
// field ("description", "expiresAt", "maxNodes") for a description that is empty,
// longer than MaxDescriptionLen, not UTF-8 or with a character of Unicode
// categories Cc, Cf, Zl or Zp (as Requester.Validate), an expiry not after now, a
// quota outside 0..maxNodes; any other error is the store's.
func Create(ctx context.Context, s idkeeper.KeyStore, spec Spec, now time.Time, maxNodes int) (secret string, k idkeeper.APIKey, err error) {
	desc := strings.TrimSpace(spec.Description)
	switch {
	case desc == "":
		return "", idkeeper.APIKey{}, protocol.Invalidf("description", "description is required: what the key is for")
	case len(desc) > MaxDescriptionLen || !utf8.ValidString(desc) || strings.ContainsFunc(desc, protocol.NotText):
		return "", idkeeper.APIKey{}, protocol.Invalidf("description", "description must be UTF-8 text of at most %d bytes, without control, "+
			"format (bidi, zero-width) or line-separator characters", MaxDescriptionLen)
	}
	// The expiry and quota rules are an update's: one place checks them.
	if err := (idkeeper.KeyUpdate{ExpiresAt: &spec.ExpiresAt, MaxNodes: &spec.MaxNodes}).Validate(now, maxNodes); err != nil {
		return "", idkeeper.APIKey{}, err
	}
	var until time.Time
	if !spec.ExpiresAt.IsZero() {
		until = protocol.Millis(spec.ExpiresAt)
	}
	secret, k = idkeeper.NewAPIKey(desc, now, until)
	k.MaxNodes, k.Admin, k.CreatedBy = spec.MaxNodes, spec.Admin, spec.CreatedBy
	if err := s.CreateAPIKey(ctx, k); err != nil {
		return "", idkeeper.APIKey{}, err
	}
	return secret, k, nil
}

// Revoke revokes the key with that ID on s at now, unless it is revoked already
// (already then tells so; RevokedAt keeps the first revocation), and returns it as
// it is afterwards, with the node IDs it holds. Its leases stay: their holders
// cannot renew and stop at their expiry. Errors: idkeeper.ErrNotFound (NOT_FOUND)
// for an unknown ID; any other error is the store's.
func Revoke(ctx context.Context, s idkeeper.Store, id string, now time.Time) (info idkeeper.KeyInfo, already bool, err error) {
	k, err := s.APIKey(ctx, id)
	if err != nil {
		return idkeeper.KeyInfo{}, false, err
	}
	already = k.Revoked()
	if !already {
		if err := s.RevokeAPIKey(ctx, id, now); err != nil {
			return idkeeper.KeyInfo{}, false, err
		}
		if k, err = s.APIKey(ctx, id); err != nil {
			return idkeeper.KeyInfo{}, false, err
		}
	}
	info, err = idkeeper.KeyInfoOf(ctx, s, k)
	return info, already, err
}

// Update changes the expiry and quota of the key with that ID on s as u says,
// checked at now under a pool of maxNodes node IDs (KeyUpdate.Validate), and
// returns it as it is afterwards. A quota below the node IDs the key holds takes
// none away: its leases stay, and its new Allocs fail (API_KEY_QUOTA_EXCEEDED)
// until it holds fewer. Errors: INVALID_REQUEST naming the field;
// idkeeper.ErrNotFound (NOT_FOUND) for an unknown ID; idkeeper.ErrConflict
// (CONFLICT) for a revoked key, which stays as it is; any other error is the
// store's.
func Update(ctx context.Context, s idkeeper.Store, id string, u idkeeper.KeyUpdate, now time.Time, maxNodes int) (idkeeper.KeyInfo, error) {
	if err := u.Validate(now, maxNodes); err != nil {
		return idkeeper.KeyInfo{}, err
	}
	if u.ExpiresAt != nil && !u.ExpiresAt.IsZero() {
		at := protocol.Millis(*u.ExpiresAt)
		u.ExpiresAt = &at
	}
	k, err := s.UpdateAPIKey(ctx, id, u)
	if err != nil {
		return idkeeper.KeyInfo{}, err
	}
	return idkeeper.KeyInfoOf(ctx, s, k)
}

// notFound is the NOT_FOUND Error of an unknown key ID, as Registry.Key answers.
func notFound(id string) *idkeeper.Error {
	return protocol.Errorf(protocol.CodeNotFound, "there is no API key %q", id)
}

// storeErr is err as the registry answers a store failure: an *idkeeper.Error as
// it is, any other error STORE_UNAVAILABLE.
func storeErr(err error) error {
	var e *idkeeper.Error
	if err == nil || errors.As(err, &e) {
		return err
	}
	return idkeeper.Unavailable(err)
}
