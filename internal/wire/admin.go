package wire

import (
	"strings"
	"time"
)

// APIKey is one API key in the answers of the registry's admin API
// (/admin/api/keys), with the members `idkeeper apikey list --format json`
// prints: never the secret, never its hash. Status is "active", "expired" or
// "revoked"; a time that is not set (a key that never expires, was never used,
// is not revoked) is null.
type APIKey struct {
	ID          string  `json:"id"`
	Description string  `json:"description"`
	Status      string  `json:"status"`
	Bootstrap   bool    `json:"bootstrap"`
	Admin       bool    `json:"admin"`
	CreatedAt   string  `json:"createdAt"`
	ExpiresAt   *string `json:"expiresAt"`
	LastUsedAt  *string `json:"lastUsedAt"`
	RevokedAt   *string `json:"revokedAt"`
	MaxNodes    int     `json:"maxNodes"`
	NodesHeld   int     `json:"nodesHeld"`
}

// APIKeyList is the 200 body of GET /admin/api/keys: every key, revoked ones
// included, sorted by ID; [] when there is none, never null.
type APIKeyList struct {
	Keys []APIKey `json:"keys"`
}

// CreateAPIKeyRequest is the body of POST /admin/api/keys. ExpiresIn is a
// duration as Go writes it ("720h", "90m"); ExpiresAt a time. At most one of them;
// neither: the key never expires.
type CreateAPIKeyRequest struct {
	Description string `json:"description"`
	ExpiresIn   string `json:"expiresIn,omitempty"`
	ExpiresAt   string `json:"expiresAt,omitempty"`
	MaxNodes    int    `json:"maxNodes,omitempty"`
	Admin       bool   `json:"admin,omitempty"`
}

// CreateAPIKeyResponse is the 201 body of POST /admin/api/keys: the key, and its
// secret, which no answer shows again.
type CreateAPIKeyResponse struct {
	Key    APIKey `json:"key"`
	Secret string `json:"secret"`
}

// RevokeAPIKeyResponse is the 200 body of POST /admin/api/keys/{id}/revoke: the
// key as it is now, and whether it had been revoked before this request (its
// revokedAt is then the first revocation's).
type RevokeAPIKeyResponse struct {
	Key            APIKey `json:"key"`
	AlreadyRevoked bool   `json:"alreadyRevoked"`
}

// WarningHeader is the response header that announces an API key's expiry.
const WarningHeader = "Warning"

// warnPrefix starts the Warning value of an expiring key: code 299 (a persistent
// warning, RFC 9111 §5.5 / RFC 7234), agent "idkeeper", and the quoted text.
const warnPrefix = `299 idkeeper "API key `

// KeyExpiryWarning is the Warning header value of an answer to a request made with
// an API key that expires within the notice period, e.g.
//
//	299 idkeeper "API key 0123456789abcdef expires at 2026-01-01T00:00:00.000Z; create a new key and rotate to it"
//
// The key ID is its public ID (never the secret); the time is in TimeFormat.
func KeyExpiryWarning(keyID string, expiresAt time.Time) string {
	return warnPrefix + keyID + " expires at " + FormatTime(expiresAt) + `; create a new key and rotate to it"`
}

// ParseKeyExpiryWarning reads a Warning header value written by KeyExpiryWarning,
// possibly among other warnings in the same value; ok is false when it holds none.
func ParseKeyExpiryWarning(v string) (keyID string, expiresAt time.Time, ok bool) {
	_, rest, found := strings.Cut(v, warnPrefix)
	if !found {
		return "", time.Time{}, false
	}
	keyID, rest, found = strings.Cut(rest, " expires at ")
	if !found || keyID == "" || strings.ContainsAny(keyID, ` ";`) {
		return "", time.Time{}, false
	}
	ts, _, found := strings.Cut(rest, ";")
	if !found {
		return "", time.Time{}, false
	}
	t, err := ParseTime(ts)
	if err != nil {
		return "", time.Time{}, false
	}
	return keyID, t, true
}
