package idkeeper

import (
	"context"
	"errors"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/idkeeper/idkeeper/protocol"
)

// MaxKeyDescriptionLen bounds an API key's description, in bytes.
const MaxKeyDescriptionLen = 200

// Key statuses, as operators see them (APIKey.Status).
const (
	KeyActive  = "active"
	KeyExpired = "expired"
	KeyRevoked = "revoked"
)

// Status is the key's status at now: KeyRevoked, KeyExpired or KeyActive, in that
// order of precedence.
func (k APIKey) Status(now time.Time) string {
	switch {
	case k.Revoked():
		return KeyRevoked
	case k.Expired(now):
		return KeyExpired
	}
	return KeyActive
}

// Who made a key (APIKey.CreatedBy), besides CreatedByUser and CreatedByKey.
const (
	CreatedByCLI = "cli" // `idkeeper apikey create --store`
	CreatedByEnv = "env" // IDKEEPER_BOOTSTRAP_API_KEY or IDKEEPER_ADMIN_API_KEY
)

// CreatedByUser is the APIKey.CreatedBy of a key made by the admin web account
// name: "user:NAME", as the audit log names the actor.
func CreatedByUser(name string) string { return "user:" + name }

// CreatedByKey is the APIKey.CreatedBy of a key made through the admin API with
// the admin key id: "key:ID", as the audit log names the actor.
func CreatedByKey(id string) string { return "key:" + id }

// KeySpec describes a new API key.
type KeySpec struct {
	Description string    // what the key is for, shown to operators: required
	ExpiresAt   time.Time // zero: the key never expires
	MaxNodes    int       // the key's quota (APIKey.MaxNodes); 0: none
	Admin       bool      // the key may use the admin API (APIKey.Admin)
	CreatedBy   string    // who makes it (APIKey.CreatedBy); "": not told
}

// KeyInfo is an API key as operators see it: the record (its hash is no secret,
// yet never shown) and the node IDs its leases hold now.
type KeyInfo struct {
	Key       APIKey
	NodesHeld int
	// NodesCooling is how many node IDs are charged to the key for cooling after
	// its Removes (LeaseStore.KeyCooling): they count against its quota with
	// NodesHeld.
	NodesCooling int
	// Quota is the quota that applies to the key (Registry.KeyQuota): its own, or
	// the server-wide default when QuotaDefault; 0: none. Only the Registry's
	// methods fill it in (the package-level functions know no default).
	Quota        int
	QuotaDefault bool
}

// keyInfo is k with the node IDs held and charged for cooling, from held and
// cooling (KeyHoldings, KeyCooling).
func keyInfo(k APIKey, held, cooling map[string]int) KeyInfo {
	return KeyInfo{Key: k, NodesHeld: held[k.ID], NodesCooling: cooling[k.ID]}
}

// usage reads the stores' holdings and cooling charges of every key.
func usage(ctx context.Context, s Store) (held, cooling map[string]int, err error) {
	if held, err = s.KeyHoldings(ctx); err != nil {
		return nil, nil, err
	}
	if cooling, err = s.KeyCooling(ctx); err != nil {
		return nil, nil, err
	}
	return held, cooling, nil
}

// CreateKey makes a random key from spec, created at now, and stores it on s. It
// returns the secret, to show once (only its hash is stored), and the record. The
// description is trimmed of surrounding space. Errors: INVALID_REQUEST naming the
// field ("description", "expiresAt", "maxNodes") for a description that is empty,
// longer than MaxKeyDescriptionLen, not UTF-8 or with a character of Unicode
// categories Cc, Cf, Zl or Zp (as Requester.Validate), an expiry not after now, a quota
// outside 0..maxNodes; any other error is the store's.
func CreateKey(ctx context.Context, s KeyStore, spec KeySpec, now time.Time, maxNodes int) (secret string, k APIKey, err error) {
	desc := strings.TrimSpace(spec.Description)
	switch {
	case desc == "":
		return "", APIKey{}, protocol.Invalidf("description", "description is required: what the key is for")
	case len(desc) > MaxKeyDescriptionLen || !utf8.ValidString(desc) || strings.ContainsFunc(desc, notText):
		return "", APIKey{}, protocol.Invalidf("description", "description must be UTF-8 text of at most %d bytes, without control, "+
			"format (bidi, zero-width) or line-separator characters", MaxKeyDescriptionLen)
	}
	if err := checkKeyExpiry(spec.ExpiresAt, now); err != nil {
		return "", APIKey{}, err
	}
	if err := checkKeyQuota(spec.MaxNodes, maxNodes); err != nil {
		return "", APIKey{}, err
	}
	var until time.Time
	if !spec.ExpiresAt.IsZero() {
		until = protocol.Millis(spec.ExpiresAt)
	}
	secret, k = NewAPIKey(desc, now, until)
	k.MaxNodes, k.Admin, k.CreatedBy = spec.MaxNodes, spec.Admin, spec.CreatedBy
	if err := s.CreateAPIKey(ctx, k); err != nil {
		return "", APIKey{}, err
	}
	return secret, k, nil
}

// checkKeyExpiry returns the INVALID_REQUEST Error of an expiry at that is
// neither zero (never) nor after now, to the millisecond.
func checkKeyExpiry(at, now time.Time) error {
	if !at.IsZero() && !protocol.Millis(at).After(protocol.Millis(now)) {
		return protocol.Invalidf("expiresAt", "the expiry %s is not in the future", protocol.Millis(at).Format(time.RFC3339Nano))
	}
	return nil
}

// checkKeyQuota returns the INVALID_REQUEST Error of a quota n outside
// 0..maxNodes.
func checkKeyQuota(n, maxNodes int) error {
	if n < 0 || n > maxNodes {
		return protocol.Invalidf("maxNodes", "maxNodes must be between 0 (no quota) and %d", maxNodes)
	}
	return nil
}

// Validate returns an INVALID_REQUEST Error naming the field ("expiresAt",
// "maxNodes") when u cannot be applied at now under a pool of maxNodes node IDs:
// an expiry that is neither zero (never) nor after now, to the millisecond; a
// quota outside 0..maxNodes. An update that changes nothing is valid. The caller
// of KeyStore.UpdateAPIKey checks it (Registry.UpdateKey); the stores
// trust it, as they trust CreateKey's checks, for both rules depend on the
// caller's clock and layout, which a store does not know.
func (u KeyUpdate) Validate(now time.Time, maxNodes int) error {
	if u.ExpiresAt != nil {
		if err := checkKeyExpiry(*u.ExpiresAt, now); err != nil {
			return err
		}
	}
	if u.MaxNodes != nil {
		return checkKeyQuota(*u.MaxNodes, maxNodes)
	}
	return nil
}

// ListKeys returns every key on s, revoked ones included, sorted by ID, with the
// node IDs its leases hold now. Errors are the store's.
func ListKeys(ctx context.Context, s Store) ([]KeyInfo, error) {
	keys, err := s.APIKeys(ctx)
	if err != nil {
		return nil, err
	}
	held, cooling, err := usage(ctx, s)
	if err != nil {
		return nil, err
	}
	out := make([]KeyInfo, len(keys))
	for i, k := range keys {
		out[i] = keyInfo(k, held, cooling)
	}
	return out, nil
}

// RevokeKey revokes the key with that ID on s at now, unless it is revoked
// already (already then tells so; RevokedAt keeps the first revocation), and
// returns it as it is afterwards. Its leases stay: their holders cannot renew and
// stop at their expiry. Errors: ErrNotFound (NOT_FOUND) for an unknown ID; any
// other error is the store's.
func RevokeKey(ctx context.Context, s Store, id string, now time.Time) (info KeyInfo, already bool, err error) {
	k, err := s.APIKey(ctx, id)
	if err != nil {
		return KeyInfo{}, false, err
	}
	already = k.Revoked()
	if !already {
		if err := s.RevokeAPIKey(ctx, id, now); err != nil {
			return KeyInfo{}, false, err
		}
		if k, err = s.APIKey(ctx, id); err != nil {
			return KeyInfo{}, false, err
		}
	}
	held, cooling, err := usage(ctx, s)
	if err != nil {
		return KeyInfo{}, false, err
	}
	return keyInfo(k, held, cooling), already, nil
}

// updateKey changes the expiry and quota of the key with that ID on s as u says,
// checked at now under a pool of maxNodes node IDs (KeyUpdate.Validate), and
// returns it as it is afterwards. A quota below the node IDs the key holds takes
// none away: its leases stay, and its new Allocs fail (API_KEY_QUOTA_EXCEEDED)
// until it holds fewer. Errors: INVALID_REQUEST naming the field; ErrNotFound
// (NOT_FOUND) for an unknown ID; ErrConflict (CONFLICT) for a revoked key, which
// stays as it is; any other error is the store's.
func updateKey(ctx context.Context, s Store, id string, u KeyUpdate, now time.Time, maxNodes int) (KeyInfo, error) {
	if err := u.Validate(now, maxNodes); err != nil {
		return KeyInfo{}, err
	}
	if u.ExpiresAt != nil && !u.ExpiresAt.IsZero() {
		at := protocol.Millis(*u.ExpiresAt)
		u.ExpiresAt = &at
	}
	k, err := s.UpdateAPIKey(ctx, id, u)
	if err != nil {
		return KeyInfo{}, err
	}
	held, cooling, err := usage(ctx, s)
	if err != nil {
		return KeyInfo{}, err
	}
	return keyInfo(k, held, cooling), nil
}

// keyNotFound is the NOT_FOUND Error of an unknown key ID.
func keyNotFound(id string) *Error {
	return protocol.Errorf(protocol.CodeNotFound, "there is no API key %q", id)
}

// CreateKey makes and stores a key from spec at the registry's clock (see the
// package-level CreateKey); the quota may be up to the layout's node IDs.
// Errors: INVALID_REQUEST, STORE_UNAVAILABLE.
func (r *Registry) CreateKey(ctx context.Context, spec KeySpec) (secret string, k APIKey, err error) {
	secret, k, err = CreateKey(ctx, r.store, spec, r.cfg.Clock(), r.cfg.Layout.Nodes())
	return secret, k, r.storeErr(err)
}

// Keys returns every key with the node IDs it holds and is charged for cooling,
// and the quota that applies to it (ListKeys, KeyQuota). Errors:
// STORE_UNAVAILABLE.
func (r *Registry) Keys(ctx context.Context) ([]KeyInfo, error) {
	ks, err := ListKeys(ctx, r.store)
	for i := range ks {
		ks[i] = r.withQuota(ks[i])
	}
	return ks, r.storeErr(err)
}

// NewKeyInfo is the KeyInfo of a key just created: nothing held, and the quota
// that applies to it.
func (r *Registry) NewKeyInfo(k APIKey) KeyInfo { return r.withQuota(KeyInfo{Key: k}) }

// withQuota fills in info's Quota and QuotaDefault.
func (r *Registry) withQuota(info KeyInfo) KeyInfo {
	info.Quota, info.QuotaDefault = r.KeyQuota(info.Key)
	return info
}

// Key returns the key with that ID and the node IDs it holds. Errors: NOT_FOUND,
// STORE_UNAVAILABLE.
func (r *Registry) Key(ctx context.Context, id string) (KeyInfo, error) {
	k, err := r.store.APIKey(ctx, id)
	if errors.Is(err, ErrNotFound) {
		return KeyInfo{}, keyNotFound(id)
	}
	if err != nil {
		return KeyInfo{}, r.storeErr(err)
	}
	held, cooling, err := usage(ctx, r.store)
	if err != nil {
		return KeyInfo{}, r.storeErr(err)
	}
	return r.withQuota(keyInfo(k, held, cooling)), nil
}

// RevokeKey revokes a key at the registry's clock (see the package-level
// RevokeKey). Errors: NOT_FOUND, STORE_UNAVAILABLE.
func (r *Registry) RevokeKey(ctx context.Context, id string) (info KeyInfo, already bool, err error) {
	info, already, err = RevokeKey(ctx, r.store, id, r.cfg.Clock())
	if errors.Is(err, ErrNotFound) {
		return KeyInfo{}, false, keyNotFound(id)
	}
	return r.withQuota(info), already, r.storeErr(err)
}

// UpdateKey changes a key's expiry and quota at the registry's clock, the quota up
// to the layout's node IDs (updateKey), and logs the change.
// Errors: INVALID_REQUEST naming "expiresAt" or "maxNodes", NOT_FOUND, CONFLICT
// for a revoked key, STORE_UNAVAILABLE.
func (r *Registry) UpdateKey(ctx context.Context, id string, u KeyUpdate) (KeyInfo, error) {
	info, err := updateKey(ctx, r.store, id, u, r.cfg.Clock(), r.cfg.Layout.Nodes())
	switch {
	case errors.Is(err, ErrNotFound):
		return KeyInfo{}, keyNotFound(id)
	case errors.Is(err, ErrConflict):
		return KeyInfo{}, protocol.Errorf(protocol.CodeConflict, "the API key %q is revoked: a revoked key stays as it was", id)
	case err != nil:
		return KeyInfo{}, r.storeErr(err)
	}
	info = r.withQuota(info)
	k := info.Key
	attrs := []any{"keyId", k.ID, "description", k.Description}
	if u.ExpiresAt != nil {
		expiry := "never"
		if !k.ExpiresAt.IsZero() {
			expiry = k.ExpiresAt.Format(time.RFC3339Nano)
		}
		attrs = append(attrs, "expiresAt", expiry)
	}
	if u.MaxNodes != nil {
		attrs = append(attrs, "maxNodes", k.MaxNodes)
	}
	attrs = append(attrs, "nodesHeld", info.NodesHeld)
	if k.MaxNodes > 0 && info.NodesHeld > k.MaxNodes {
		r.log.Warn("API key updated: it holds more node IDs than its new quota; its leases stay, its new Allocs fail "+
			"until it holds fewer", attrs...)
	} else {
		r.log.Info("API key updated", attrs...)
	}
	return info, nil
}

// Now is the registry's own clock (Config.Clock): the time API keys expire by.
func (r *Registry) Now() time.Time { return r.cfg.Clock() }
