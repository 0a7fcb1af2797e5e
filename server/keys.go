package server

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"strings"

	"github.com/idkeeper/idkeeper"
)

// ensureBootstrapKey stores the bootstrap API key unless it is there, retiring the
// previous bootstrap key, and logs what it did; the key itself is never logged.
func ensureBootstrapKey(ctx context.Context, reg *idkeeper.Registry, secret string, log *slog.Logger) error {
	if secret == "" {
		return nil
	}
	created, retired, err := reg.EnsureBootstrapKey(ctx, secret)
	if err != nil {
		return fmt.Errorf("store the bootstrap API key: %w", err)
	}
	logKey(log, "bootstrap", secret, created, retired)
	return nil
}

// ensureAdminKey stores the admin API key of AdminKeyEnv unless it is there,
// retiring the previous one, and logs what it did; the key itself is never logged.
func ensureAdminKey(ctx context.Context, reg *idkeeper.Registry, secret string, log *slog.Logger) error {
	if secret == "" {
		return nil
	}
	created, retired, err := reg.EnsureAdminKey(ctx, secret)
	if err != nil {
		return fmt.Errorf("store the admin API key: %w", err)
	}
	logKey(log, "admin", secret, created, retired)
	return nil
}

// logKey logs what ensuring the key of kind ("bootstrap", "admin") did.
func logKey(log *slog.Logger, kind, secret string, created bool, retired []string) {
	id, _ := idkeeper.HashAPIKey(secret)
	if created {
		log.Info(kind+" API key created", "keyId", id)
	} else {
		log.Debug(kind+" API key present", "keyId", id)
	}
	for _, old := range retired {
		log.Warn("retired the previous "+kind+" API key: it authenticates nothing from now on", "keyId", old, "newKeyId", id)
	}
}

// warnNoKeyQuota logs, at start, that no default quota protects the pool.
func warnNoKeyQuota(log *slog.Logger, reg *idkeeper.Registry) {
	if reg.DefaultKeyQuota() == 0 {
		log.Warn("no default API key quota (--key-max-nodes-default 0): a key without its own quota may take " +
			"every free node ID, and keep them cooling for up to the lease duration after removing them; " +
			"give every key a quota (apikey create --max-nodes, the admin) or set a default")
	}
}

// prefixList is prefixes comma-separated, for the log.
func prefixList(prefixes []netip.Prefix) string {
	s := make([]string, len(prefixes))
	for i, p := range prefixes {
		s[i] = p.String()
	}
	return strings.Join(s, ",")
}
