package wire

import (
	"encoding/json"
	"strings"
	"time"
)

// APIKey is one API key in the answers of the registry's admin API
// (/admin/api/keys), with the members `idkeeper apikey list --format json`
// prints: never the secret, never its hash. Status is "active", "expired" or
// "revoked"; a time that is not set (a key that never expires, was never used,
// is not revoked) is null. CreatedBy is who made it: "user:NAME", "key:ID",
// "cli", "env", or "" for keys made before it was recorded.
type APIKey struct {
	ID          string  `json:"id"`
	Description string  `json:"description"`
	Status      string  `json:"status"`
	Bootstrap   bool    `json:"bootstrap"`
	Admin       bool    `json:"admin"`
	CreatedAt   string  `json:"createdAt"`
	CreatedBy   string  `json:"createdBy"`
	ExpiresAt   *string `json:"expiresAt"`
	LastUsedAt  *string `json:"lastUsedAt"`
	RevokedAt   *string `json:"revokedAt"`
	MaxNodes    int     `json:"maxNodes"`
	NodesHeld   int     `json:"nodesHeld"`
	// EffectiveMaxNodes is the quota that applies: MaxNodes, or the server-wide
	// default (--key-max-nodes-default) when MaxNodesIsDefault; 0: none.
	EffectiveMaxNodes int  `json:"effectiveMaxNodes"`
	MaxNodesIsDefault bool `json:"maxNodesIsDefault"`
	// NodesCooling are node IDs cooling after the key's Removes: they count
	// against its quota with NodesHeld until they are ready.
	NodesCooling int `json:"nodesCooling"`
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
// secret, which no answer shows again (SecretShown true). The replay of a create
// retried with its Idempotency-Key holds the key as it was created and no secret:
// SecretShown false, and Message says that the earlier answer showed it.
type CreateAPIKeyResponse struct {
	Key         APIKey `json:"key"`
	Secret      string `json:"secret,omitempty"`
	SecretShown bool   `json:"secretShown"`
	Message     string `json:"message,omitempty"`
}

// RevokeAPIKeyResponse is the 200 body of POST /admin/api/keys/{id}/revoke: the
// key as it is now, whether it had been revoked before this request (its
// revokedAt is then the first revocation's), and Leases, a sentence saying what
// becomes of the node IDs its leases hold.
type RevokeAPIKeyResponse struct {
	Key            APIKey `json:"key"`
	AlreadyRevoked bool   `json:"alreadyRevoked"`
	Leases         string `json:"leases,omitempty"`
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

// AdminAPIPrefix starts every route of the registry's admin API (package admin);
// the admin pages live under /admin/ beside it.
const AdminAPIPrefix = "/admin/api/"

// The admin API of issue #10 (package admin): accounts and sessions, the key
// update, the allow-list, the pool and its leases, the audit log and the store's
// health. Times are in TimeFormat; a time that is not set is null.

// LoginRequest is the body of POST /admin/api/login.
type LoginRequest struct {
	Name     string `json:"name"`
	Password string `json:"password"`
}

// UserRef names an account and its role.
type UserRef struct {
	Name string `json:"name"`
	Role string `json:"role"`
}

// LoginResponse is the 200 body of POST /admin/api/login; the session is in the
// Set-Cookie header.
type LoginResponse struct {
	User UserRef `json:"user"`
}

// Me is the 200 body of GET /admin/api/me: who the caller is. Kind is "user"
// for a session, "key" for an admin API key (Name then "key:ID", Role admin, and
// no login or password times).
type Me struct {
	Name              string  `json:"name"`
	Role              string  `json:"role"`
	Kind              string  `json:"kind"`
	CreatedAt         string  `json:"createdAt"`
	LastLoginAt       *string `json:"lastLoginAt"`
	PasswordChangedAt *string `json:"passwordChangedAt"`
}

// ChangePasswordRequest is the body of POST /admin/api/me/password.
type ChangePasswordRequest struct {
	OldPassword string `json:"oldPassword"`
	NewPassword string `json:"newPassword"`
}

// User is one account in the admin API's answers: never its password hash.
type User struct {
	Name              string  `json:"name"`
	Role              string  `json:"role"`
	Disabled          bool    `json:"disabled"`
	CreatedAt         string  `json:"createdAt"`
	CreatedBy         string  `json:"createdBy"`
	LastLoginAt       *string `json:"lastLoginAt"`
	PasswordChangedAt *string `json:"passwordChangedAt"`
}

// UserList is the 200 body of GET /admin/api/users, sorted by name.
type UserList struct {
	Users []User `json:"users"`
}

// CreateUserRequest is the body of POST /admin/api/users.
type CreateUserRequest struct {
	Name     string `json:"name"`
	Role     string `json:"role"`
	Password string `json:"password"`
}

// UpdateUserRequest is the body of POST /admin/api/users/{name}: at least one of
// its members.
type UpdateUserRequest struct {
	Role     string `json:"role,omitempty"`
	Disabled *bool  `json:"disabled,omitempty"`
}

// ResetPasswordRequest is the body of POST /admin/api/users/{name}/password.
type ResetPasswordRequest struct {
	Password string `json:"password"`
}

// UpdateAPIKeyRequest is the body of POST /admin/api/keys/{id}: at least one
// member. ExpiresAt is a time in quotes, or null for a key that never expires
// (absent: unchanged); ExpiresIn a duration from now as Go writes it ("720h"),
// instead of ExpiresAt; MaxNodes the new quota (0: none).
type UpdateAPIKeyRequest struct {
	ExpiresAt json.RawMessage `json:"expiresAt,omitempty"`
	ExpiresIn string          `json:"expiresIn,omitempty"`
	MaxNodes  *int            `json:"maxNodes,omitempty"`
}

// AllowEntry is one entry of the IP allow-list kept in the store.
type AllowEntry struct {
	Prefix    string `json:"prefix"`
	Note      string `json:"note"`
	CreatedBy string `json:"createdBy"`
	CreatedAt string `json:"createdAt"`
}

// AllowList is the 200 body of GET /admin/api/allowlist: the fixed floor
// (--allowed-ips), the trusted proxies (--trusted-proxies), both from the
// configuration, and the entries kept in the store. All three [] when empty.
type AllowList struct {
	Floor          []string     `json:"floor"`
	TrustedProxies []string     `json:"trustedProxies"`
	Entries        []AllowEntry `json:"entries"`
}

// AddAllowEntryRequest is the body of POST /admin/api/allowlist: a CIDR prefix
// or a bare address, and why it is there.
type AddAllowEntryRequest struct {
	Prefix string `json:"prefix"`
	Note   string `json:"note"`
}

// RemoveAllowEntryRequest is the body of POST /admin/api/allowlist/remove.
// AllowAll must be true to remove the last entry while the floor is empty: the
// list then allows every address.
type RemoveAllowEntryRequest struct {
	Prefix   string `json:"prefix"`
	AllowAll bool   `json:"allowAll,omitempty"`
}

// Pool is the 200 body of GET /admin/api/pool: the counts and the node range
// (first, last) of GET /v1/leases/remaining, the store's time they were read at,
// and the status of every node ID ("free", "cooling", "leased", "grace",
// "quarantined"): Nodes[i] is node ID first + i.
type Pool struct {
	RemainingResponse
	At    string   `json:"at"`
	Nodes []string `json:"nodes"`
}

// Skew is the clock-skew observation the registry stored for a requester, as it
// judged it then: skew = server − client (positive: the client is behind), the
// threshold in force, and the level "ok", "warn" or "reject".
type Skew struct {
	SkewMs      int64  `json:"skewMs"`
	ThresholdMs int64  `json:"thresholdMs"`
	Level       string `json:"level"`
	ObservedAt  string `json:"observedAt"`
}

// AdminLease is one lease in the admin API's answers. Status is "leased" or
// "grace" (expired, not reclaimed yet); Skew is null when the store keeps no
// observation of the requester.
type AdminLease struct {
	NodeID       int64     `json:"nodeId"`
	Requester    Requester `json:"requester"`
	KeyID        string    `json:"keyId"`
	FencingToken uint64    `json:"fencingToken"`
	NotBefore    string    `json:"notBefore"`
	ExpiresAt    string    `json:"expiresAt"`
	GrantedAt    string    `json:"grantedAt"`
	RenewedAt    *string   `json:"renewedAt"`
	Status       string    `json:"status"`
	Skew         *Skew     `json:"skew"`
}

// LeaseList is the 200 body of GET /admin/api/leases, sorted by node ID, and the
// server's time the statuses are judged at.
type LeaseList struct {
	At     string       `json:"at"`
	Leases []AdminLease `json:"leases"`
}

// RevokeLeaseRequest is the body of POST /admin/api/leases/{node}/revoke: the
// fencing token of the lease to revoke, so that a lease granted meanwhile is not.
type RevokeLeaseRequest struct {
	FencingToken uint64 `json:"fencingToken"`
}

// RevokeLeaseResponse is the 200 body of POST /admin/api/leases/{node}/revoke:
// the lease as it was, and when its node ID may be granted again.
type RevokeLeaseResponse struct {
	Lease            AdminLease `json:"lease"`
	QuarantinedUntil string     `json:"quarantinedUntil"`
}

// AuditEntry is one entry of the audit log.
type AuditEntry struct {
	Seq      uint64 `json:"seq"`
	At       string `json:"at"`
	Actor    string `json:"actor"`
	Action   string `json:"action"`
	Target   string `json:"target"`
	RemoteIP string `json:"remoteIp"`
	Detail   string `json:"detail"`
	Hash     string `json:"hash"`
}

// AuditPage is the 200 body of GET /admin/api/audit: entries newest first, and
// Next, the "before" of the next page, null at the log's start.
type AuditPage struct {
	Entries []AuditEntry `json:"entries"`
	Next    *uint64      `json:"next"`
}

// StoreHealth is the 200 body of GET /admin/api/store. Generation is the one the
// server serves under (null before it adopted one); LastReset is when the last
// store reset was recovered from (the generation's time when its origin is
// "recovered"; null when the store never was). Reachable false: the store did not
// answer now, and its members below are zero. Durability is what the store's
// settings guarantee, when the server knows.
type StoreHealth struct {
	Phase          string      `json:"phase"`
	Generation     *Generation `json:"generation"`
	LastReset      *string     `json:"lastReset"`
	Reachable      bool        `json:"reachable"`
	FencingCounter uint64      `json:"fencingCounter"`
	Nodes          int         `json:"nodes"`
	// Pool is the store's pool, its node range and layout (issue #22); null when
	// the store did not answer or holds no pool (not initialised).
	Pool          *StorePool `json:"pool"`
	StoreTime     *string    `json:"storeTime"`
	ClockOK       bool       `json:"clockOk"`
	ClockOffsetMs int64      `json:"clockOffsetMs"`
	Durability    string     `json:"durability,omitempty"`
	// ClockCheck says how the replicas' clocks are checked (DESIGN §8).
	ClockCheck string `json:"clockCheck,omitempty"`
	// Reset tells the last reset more fully; null when LastReset is.
	Reset *StoreReset `json:"reset"`
	// JobLocks are the job locks the store holds now, every replica's, sorted by
	// name; null when they could not be read.
	JobLocks []JobLock `json:"jobLocks"`
	// JobRuns are the last run of each periodic job on the server that answers,
	// sorted by job; [] before any.
	JobRuns []JobRun `json:"jobRuns"`
	// LastRestore is the last restore of a backup through this server's admin API
	// since it started (its memory; the audit log's backup.restore entries hold
	// every one); null when none.
	LastRestore *Restore `json:"lastRestore"`
	// Alerts are the Discord alerts' state; null when the store keeps none or
	// it could not be read.
	Alerts *Alerts `json:"alerts"`
}

// StorePool is the store's pool in GET /admin/api/store (issue #22): the node IDs
// First..Last, both included, Nodes of them (Last − First + 1, the same as
// StoreHealth.Nodes), which its clients mint IDs with on Layout. The store keeps
// it from its initialisation on: First and the layout never change, only Last
// grows.
type StorePool struct {
	First  int64        `json:"first"`
	Last   int64        `json:"last"`
	Nodes  int          `json:"nodes"`
	Layout LayoutLimits `json:"layout"`
}

// LayoutLimits is a Layout (its epoch and widths, flattened into the object) with
// what it implies: IDsPerSecond, the ceiling of one node ID (2^sequenceBits ×
// 1000), and End, the first instant the layout cannot represent (the epoch +
// 2^timestampBits ms), after which no ID can be minted on it.
type LayoutLimits struct {
	Layout
	IDsPerSecond int64  `json:"idsPerSecond"`
	End          string `json:"end"`
}

// Alerts is the Discord alerts' part of GET /admin/api/store.
type Alerts struct {
	// Webhooks is how many enabled users set a webhook: the alerts' recipients.
	Webhooks int `json:"webhooks"`
	// States are the state-based alerts (capacity, clock-skew) as the store
	// keeps them, shared by every replica.
	States []AlertState `json:"states"`
}

// AlertState is one state-based alert: whether it stands, since when, when its
// last message went out and when it was last checked (null: never), and what the
// last check found.
type AlertState struct {
	Name     string  `json:"name"`
	Firing   bool    `json:"firing"`
	Since    *string `json:"since"`
	LastSent *string `json:"lastSent"`
	Checked  *string `json:"checked"`
	Summary  string  `json:"summary"`
}

// StoreReset is the last store reset in GET /admin/api/store: when it was
// recovered from, the generation that began then, and the end of the quarantine
// it set (its time + lease duration + grace, or what the replica that recovered
// it set). Why is what showed the reset, known to the replica that recovered it
// only (null elsewhere). Quarantined are the node IDs quarantined now, whatever
// quarantined them, grouped by the end of their quarantine (null when the store
// could not be read). Restored are the audit log's lease.restore entries since
// the reset, newest first, at most 50; RestoredMore counts the others found, and
// RestoredComplete is false when the audit log was not read back to the reset
// (it is read back 10,000 entries at most).
type StoreReset struct {
	At               string            `json:"at"`
	Generation       uint64            `json:"generation"`
	QuarantineEnd    string            `json:"quarantineEnd"`
	Why              *string           `json:"why"`
	Quarantined      []QuarantineGroup `json:"quarantined"`
	Restored         []AuditEntry      `json:"restored"`
	RestoredMore     int               `json:"restoredMore"`
	RestoredComplete bool              `json:"restoredComplete"`
}

// QuarantineGroup is the node IDs whose quarantine ends at Until: Nodes as ranges
// of consecutive IDs ("0-16,18-4095"), Count of them.
type QuarantineGroup struct {
	Nodes string `json:"nodes"`
	Count int    `json:"count"`
	Until string `json:"until"`
}

// JobLock is a job lock the store holds: its job, the replica that holds it
// (the registry's owner name), since when, and when it lapses by itself.
type JobLock struct {
	Name     string `json:"name"`
	Owner    string `json:"owner"`
	LockedAt string `json:"lockedAt"`
	Until    string `json:"until"`
}

// JobRun is the last run of a periodic job on one replica: outcome "ran",
// "skipped" (another run held its job lock, or the registry did not serve) or
// "error"; Detail says what it did, who held the lock, or the error.
type JobRun struct {
	Job      string `json:"job"`
	Started  string `json:"started"`
	Finished string `json:"finished"`
	Outcome  string `json:"outcome"`
	Detail   string `json:"detail"`
}

// AdminNode is the 200 body of GET /admin/api/nodes/{node}: the node ID's state
// as the store keeps it, judged at At. Status is one of GET /admin/api/pool's;
// Fenced is max(watermark, floor), after which a new grant's window opens; a time
// never set is null. Lease is null when the node ID holds none.
type AdminNode struct {
	NodeID           int64       `json:"nodeId"`
	Status           string      `json:"status"`
	At               string      `json:"at"`
	Watermark        *string     `json:"watermark"`
	Floor            *string     `json:"floor"`
	Fenced           *string     `json:"fenced"`
	QuarantinedUntil *string     `json:"quarantinedUntil"`
	LastToken        uint64      `json:"lastToken"`
	Restorable       bool        `json:"restorable"`
	Lease            *AdminLease `json:"lease"`
}

// IDOrigin is the 200 body of GET /admin/api/ids/{id}/origin: the ID decoded
// with the registry's layout and the lease that held its node ID at its
// millisecond (issue #16). Leases is empty, and Note says why, when no lease is
// known; it holds two or more only for a contested node ID.
type IDOrigin struct {
	ID      string        `json:"id"`
	Decoded OriginDecoded `json:"decoded"`
	Leases  []OriginLease `json:"leases"`
	Note    string        `json:"note,omitempty"`
}

// OriginDecoded is an ID's fields.
type OriginDecoded struct {
	Time        string `json:"time"`
	TimestampMs int64  `json:"timestampMs"`
	NodeID      int64  `json:"nodeId"`
	Sequence    int64  `json:"sequence"`
}

// OriginLease is one lease history record: End is "" while held (and then
// EndedAt absent), else removed, reclaimed, revoked or contested.
type OriginLease struct {
	NodeID       int64     `json:"nodeId"`
	FencingToken uint64    `json:"fencingToken"`
	Requester    Requester `json:"requester"`
	KeyID        string    `json:"keyId"`
	Client       *Client   `json:"client,omitempty"`
	GrantedAt    string    `json:"grantedAt"`
	NotBefore    string    `json:"notBefore"`
	WindowEnd    string    `json:"windowEnd"`
	End          string    `json:"end"`
	EndedAt      string    `json:"endedAt,omitempty"`
	MintedUpTo   string    `json:"mintedUpTo,omitempty"`
	FromReceipt  bool      `json:"fromReceipt"`
}
