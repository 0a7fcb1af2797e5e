package idkeeper

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/idkeeper/idkeeper/internal/plural"
)

// KeyExpiryNotice is how long before its expiry an API key is announced: a key in
// use that expires within it is warned about in the log once a day
// (WarnExpiringKeys), and every answer to a request made with it says so
// (KeyNotice; the http package's Warning header).
const KeyExpiryNotice = 14 * 24 * time.Hour

// keyWarnInterval is how often, at most, WarnExpiringKeys warns about one key,
// across every replica that shares the store.
const keyWarnInterval = 24 * time.Hour

// keyWarnJob prefixes the job lock, one per key, that spaces its warnings.
const keyWarnJob = "api-key-expiry:"

// Timing of the registry's loop for WarnExpiringKeys: the first check a minute
// after Open, then every hour, so a key that enters its notice, or is created
// with a short life, is warned about within the hour.
const (
	keyCheckFirst = time.Minute
	keyCheckEvery = time.Hour
)

// KeyNotice returns k's expiry when it lies within KeyExpiryNotice of the
// registry's clock (or has passed): what an answer to a request authenticated with
// k announces. ok is false for a key that never expires or expires later.
func (r *Registry) KeyNotice(k APIKey) (expiresAt time.Time, ok bool) {
	if k.ExpiresAt.IsZero() || k.ExpiresAt.Sub(r.cfg.Clock()) > KeyExpiryNotice {
		return time.Time{}, false
	}
	return k.ExpiresAt, true
}

// InUseWindow is how recent a key's last use (APIKey.LastUsedAt) must be for the
// key to count as in use: the lease duration plus the grace period. A process that
// holds leases renews well within the lease duration, so every key of a running
// fleet was used within it.
func (r *Registry) InUseWindow() time.Duration { return r.cfg.LeaseDuration + r.cfg.Grace }

// InUse reports whether a key counts as in use at now: it is not revoked, and its
// leases hold node IDs (expired leases that cleanup has not reclaimed yet
// included) or it authenticated a request within InUseWindow before now (LastUsedAt,
// which each replica records at most once a minute). An expired key authenticates
// nothing, so it stops being in use once its holders' leases are reclaimed: at most
// InUseWindow plus a cleanup interval after its expiry.
func (r *Registry) InUse(k KeyInfo, now time.Time) bool {
	if k.Key.Revoked() {
		return false
	}
	used := !k.Key.LastUsedAt.IsZero() && now.Sub(k.Key.LastUsedAt) <= r.InUseWindow()
	return k.NodesHeld > 0 || used
}

// ExpiringKeys returns the keys in use (InUse) that have an expiry, expired ones
// included, the earliest expiry first, and the registry's clock (Config.Clock, by
// which keys expire) at which it judged them. Keys that never expire are left out.
// Errors: STORE_UNAVAILABLE.
func (r *Registry) ExpiringKeys(ctx context.Context) (keys []KeyInfo, now time.Time, err error) {
	all, err := ListKeys(ctx, r.store)
	if err != nil {
		return nil, time.Time{}, r.storeErr(err)
	}
	now = r.cfg.Clock()
	for _, k := range all {
		if !k.Key.ExpiresAt.IsZero() && r.InUse(k, now) {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, func(a, b KeyInfo) int {
		return cmp.Or(a.Key.ExpiresAt.Compare(b.Key.ExpiresAt), cmp.Compare(a.Key.ID, b.Key.ID))
	})
	return keys, now, nil
}

// WarnExpiringKeys logs, for each key in use (ExpiringKeys) that expires within
// KeyExpiryNotice, a warning with its ID and description (never its secret), its
// expiry, its last use and the node IDs its leases hold; for a key in use that has
// expired already, an error. Each key is logged about at most once per
// keyWarnInterval across the replicas that share the store: a job lock per key,
// timed by the store's clock, held for that long. It returns how many keys it
// logged. The registry's loop runs it a minute after Open and every hour; it does
// nothing while the registry does not serve. Errors: STORE_UNAVAILABLE.
func (r *Registry) WarnExpiringKeys(ctx context.Context) (logged int, err error) {
	started, serving := r.cfg.Clock(), r.Serving() == nil
	defer func() {
		r.noteJob(KeyExpiryJob, started, serving, err, "warned about "+plural.N(logged, "key", "keys"),
			"the registry did not serve: "+string(r.Phase()))
	}()
	if !serving {
		return 0, nil
	}
	keys, now, err := r.ExpiringKeys(ctx)
	if err != nil {
		return 0, err
	}
	for _, k := range keys {
		left := k.Key.ExpiresAt.Sub(now)
		if left > KeyExpiryNotice {
			break // sorted: every later key expires later still
		}
		_, ok, err := r.store.TryLock(ctx, keyWarnJob+k.Key.ID, r.cfg.Owner, keyWarnInterval)
		if err != nil {
			return logged, r.storeErr(err)
		}
		if !ok {
			continue // warned about within the interval, here or on another replica
		}
		attrs := []any{"keyId", k.Key.ID, "description", k.Key.Description,
			"expiresAt", k.Key.ExpiresAt.UTC().Format(time.RFC3339), "nodesHeld", k.NodesHeld}
		if !k.Key.LastUsedAt.IsZero() {
			attrs = append(attrs, "lastUsedAt", k.Key.LastUsedAt.UTC().Format(time.RFC3339))
		}
		if left <= 0 {
			r.log.Error("an API key in use has expired: its clients cannot renew and stop when their leases end; "+
				"create a new key (idkeeper apikey create) and give it to them", attrs...)
		} else {
			attrs = append(attrs, "expiresIn", left.Round(time.Minute).String())
			r.log.Warn("an API key in use expires soon: create a new key (idkeeper apikey create), give it to its "+
				"clients, then revoke this one", attrs...)
		}
		logged++
	}
	return logged, nil
}
