package apikey

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/protocol"
)

// Admin administers the keys of a Registry's store at the registry's clock
// (Config.Clock, by which keys expire), under its layout's pool, answering each
// key with the quota that applies to it (Registry.KeyQuota). It is safe for
// concurrent use; it does no I/O until called.
type Admin struct {
	reg *idkeeper.Registry
	log *slog.Logger
}

// NewAdmin returns the Admin of r's keys; it logs through r's Config.Logger.
func NewAdmin(r *idkeeper.Registry) *Admin { return &Admin{reg: r, log: r.Config().Logger} }

// Create makes and stores a key from spec (see the package-level Create); the
// quota may be up to the layout's node IDs. Errors: INVALID_REQUEST,
// STORE_UNAVAILABLE.
func (a *Admin) Create(ctx context.Context, spec Spec) (secret string, k idkeeper.APIKey, err error) {
	secret, k, err = Create(ctx, a.reg.Store(), spec, a.reg.Now(), a.reg.Layout().Nodes())
	return secret, k, storeErr(err)
}

// NewInfo is the KeyInfo of a key just created: nothing held, and the quota that
// applies to it.
func (a *Admin) NewInfo(k idkeeper.APIKey) idkeeper.KeyInfo {
	return a.withQuota(idkeeper.KeyInfo{Key: k})
}

// withQuota fills in info's Quota and QuotaDefault.
func (a *Admin) withQuota(info idkeeper.KeyInfo) idkeeper.KeyInfo {
	info.Quota, info.QuotaDefault = a.reg.KeyQuota(info.Key)
	return info
}

// Revoke revokes a key (see the package-level Revoke). Errors: NOT_FOUND,
// STORE_UNAVAILABLE.
func (a *Admin) Revoke(ctx context.Context, id string) (info idkeeper.KeyInfo, already bool, err error) {
	info, already, err = Revoke(ctx, a.reg.Store(), id, a.reg.Now())
	if errors.Is(err, idkeeper.ErrNotFound) {
		return idkeeper.KeyInfo{}, false, notFound(id)
	}
	return a.withQuota(info), already, storeErr(err)
}

// Update changes a key's expiry and quota, the quota up to the layout's node IDs
// (see the package-level Update), and logs the change. Errors: INVALID_REQUEST
// naming "expiresAt" or "maxNodes", NOT_FOUND, CONFLICT for a revoked key,
// STORE_UNAVAILABLE.
func (a *Admin) Update(ctx context.Context, id string, u idkeeper.KeyUpdate) (idkeeper.KeyInfo, error) {
	info, err := Update(ctx, a.reg.Store(), id, u, a.reg.Now(), a.reg.Layout().Nodes())
	switch {
	case errors.Is(err, idkeeper.ErrNotFound):
		return idkeeper.KeyInfo{}, notFound(id)
	case errors.Is(err, idkeeper.ErrConflict):
		return idkeeper.KeyInfo{}, protocol.Errorf(protocol.CodeConflict, "the API key %q is revoked: a revoked key stays as it was", id)
	case err != nil:
		return idkeeper.KeyInfo{}, storeErr(err)
	}
	info = a.withQuota(info)
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
		a.log.Warn("API key updated: it holds more node IDs than its new quota; its leases stay, its new Allocs fail "+
			"until it holds fewer", attrs...)
	} else {
		a.log.Info("API key updated", attrs...)
	}
	return info, nil
}
