package idkeeper

import (
	"context"
	"errors"
	"time"

	"github.com/idkeeper/idkeeper/protocol"
)

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

// KeyInfoOf returns k with the node IDs it holds and is charged for cooling on s
// now (KeyHoldings, KeyCooling); Quota is left to the caller (Registry.KeyQuota).
// Errors are the store's.
func KeyInfoOf(ctx context.Context, s Store, k APIKey) (KeyInfo, error) {
	held, cooling, err := usage(ctx, s)
	if err != nil {
		return KeyInfo{}, err
	}
	return keyInfo(k, held, cooling), nil
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

// keyNotFound is the NOT_FOUND Error of an unknown key ID.
func keyNotFound(id string) *Error {
	return protocol.Errorf(protocol.CodeNotFound, "there is no API key %q", id)
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
	info, err := KeyInfoOf(ctx, r.store, k)
	if err != nil {
		return KeyInfo{}, r.storeErr(err)
	}
	return r.withQuota(info), nil
}

// Now is the registry's own clock (Config.Clock): the time API keys expire by.
func (r *Registry) Now() time.Time { return r.cfg.Clock() }
