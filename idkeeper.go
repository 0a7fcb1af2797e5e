// Package idkeeper leases Snowflake node IDs to processes.
//
// A process (a Requester) asks the registry for N node IDs (Alloc), keeps them by
// renewing its leases (Renew) and gives them back when it stops (Remove). While it
// holds a lease it mints IDs locally, and only with timestamps inside the lease's
// window (NotBefore … ExpiresAt), so two holders of one node ID never mint the same
// ID even when their real times overlap.
//
// This root package holds:
//
//   - the domain vocabulary: NodeID, Requester, Lease, Grant, Layout, Generation,
//     APIKey, and the sentinel errors of the domain (error.go; the codes are
//     package protocol's, and their HTTP status the http adapter's business,
//     internal/problem). Requester, ClientInfo, Code and Error are protocol's,
//     named here as aliases, so that the client library shares them without
//     importing the engine;
//   - the Store contract every storage adapter implements (LeaseStore, LockStore,
//     KeyStore, SkewStore, HistoryStore), the argument checks every store shares
//     (storecheck.go), and the optional ReplicatedStore and IdentifiedStore;
//   - the Registry: the lease policy over a Store, with its injected clocks, lease
//     receipts (signed with Config.ReceiptSecret), the replica's own state
//     (StateKeeper), store-reset recovery, the cleanup job and the audit log's
//     writer.
//
// What the admin web keeps lives beside it, each in a package named for what it
// owns: account (users, sessions, logins), audit (the hash chain), allowlist,
// snapshot (a store's whole state and the restore check); the idempotency and
// alert records' contracts are in the packages that consume them.
//
// It uses the standard library only (and the module's std-only snowflake, protocol,
// audit and small internal helpers); adapters (bolt, redis, http, client, …)
// import it, never the other way round.
package idkeeper

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/idkeeper/idkeeper/protocol"
	"github.com/idkeeper/idkeeper/snowflake"
)

// Layout is the bit layout of the IDs the registry's clients mint.
type Layout = snowflake.Layout

// DefaultLayout is 41 timestamp, 12 node and 10 sequence bits on 2026-01-01.
var DefaultLayout = snowflake.DefaultLayout

// NodeID identifies one node slot of the layout: 0..2^NodeBits−1.
type NodeID int

// Requester identifies one client session (DESIGN §3): machine ID, PID, start time
// and the session's random instance. It is protocol.Requester, where its rules
// (Validate, ValidateStored, Key) are written, shared with the client library.
type Requester = protocol.Requester

// notText reports a rune that must not appear in text a caller sends
// (protocol.NotText: Unicode categories Cc, Cf, Zl and Zp).
func notText(r rune) bool { return protocol.NotText(r) }

// ParseRequesterKey is the inverse of Requester.Key.
func ParseRequesterKey(key string) (Requester, error) {
	bad := func(err error) (Requester, error) {
		if err != nil {
			return Requester{}, fmt.Errorf("idkeeper: malformed requester key %q: %w", key, err)
		}
		return Requester{}, fmt.Errorf("idkeeper: malformed requester key %q", key)
	}
	pid, rest, ok1 := strings.Cut(key, "/")
	ms, rest, ok2 := strings.Cut(rest, "/")
	instance, machine, ok3 := strings.Cut(rest, "/")
	if !ok1 || !ok2 || !ok3 {
		return bad(nil)
	}
	p, err := strconv.Atoi(pid)
	if err != nil {
		return bad(err)
	}
	m, err := strconv.ParseInt(ms, 10, 64)
	if err != nil {
		return bad(err)
	}
	return Requester{MachineID: machine, PID: p, StartedAt: time.UnixMilli(m).UTC(), Instance: instance}, nil
}

// Lease is one node ID held by one requester. All times are UTC to the millisecond
// and come from the deployment's time authority (the store's clock).
type Lease struct {
	NodeID    NodeID
	Requester Requester
	// NotBefore is the first millisecond the holder may mint with: one past the
	// node's watermark at grant time. It never changes for the life of the lease.
	NotBefore time.Time
	// ExpiresAt is the end of the lease and of its minting window (inclusive).
	ExpiresAt time.Time
	// FencingToken grows with every new grant, across all node IDs; Renew keeps it.
	// It lies in 1..MaxFencingToken.
	FencingToken uint64
	GrantedAt    time.Time
	RenewedAt    time.Time // zero until the first Renew
	// KeyID is the public ID of the API key that allocated the lease: its owner
	// (DESIGN §3). Renew and Remove with another key change nothing.
	KeyID string
	// Receipt is the lease's receipt (Receipts), set by the Registry on the leases
	// it returns; stores leave it empty.
	Receipt string
}

// Expired reports whether the lease has ended at now.
func (l Lease) Expired(now time.Time) bool { return now.After(l.ExpiresAt) }

// MaxFencingToken is the largest fencing token: 2^53−1, exact in JSON, JavaScript
// and Lua. Tokens are 1..MaxFencingToken; the counter never wraps.
const MaxFencingToken = 1<<53 - 1

// Grant is the answer of Alloc and Renew.
type Grant struct {
	Leases []Lease // sorted by NodeID; empty from Renew means "holds nothing"
	Now    time.Time
	// Fence is the store's fencing counter after the operation: the highest token it
	// has ever handed out.
	Fence uint64
	// Restored are the node IDs a Renew restored from its claims after a reset, and
	// Contested those it found claimed twice and quarantined (RenewParams.Claims).
	Restored, Contested []NodeID
}

// Counts is the state of the node pool at one instant. Total = Remaining + Leased +
// InGrace + Quarantined, and Remaining = ready + Cooling: a cooling node ID is
// allocatable, so it counts in Remaining, but its next holder mints nothing before
// its window opens (LeaseStore: ready, cooling, quarantined).
type Counts struct {
	Total     int // node IDs in the pool
	Remaining int // free and allocatable now: ready ones and cooling ones (Cooling)
	// Cooling is the part of Remaining whose fenced watermark is not before now: a
	// grant of one of them has NotBefore after now, up to a whole lease later (a
	// holder that ended without mintedUpTo, a crash, a store reset).
	Cooling     int
	Leased      int // held by a lease that has not expired
	InGrace     int // held by an expired lease that cleanup has not reclaimed yet
	Quarantined int // free, but not allocatable before their quarantine ends
	// NextReadyAt is when the first cooling node ID turns ready: its lowest fenced
	// watermark + 1 ms, which is the NotBefore a grant of it gets. Zero when
	// Cooling is 0. Quarantined node IDs are not considered.
	NextReadyAt time.Time
}

// Equal reports whether c and o hold the same counts and the same NextReadyAt
// instant (== compares time.Time representations, not instants).
func (c Counts) Equal(o Counts) bool {
	a, b := c, o
	a.NextReadyAt, b.NextReadyAt = time.Time{}, time.Time{}
	return a == b && c.NextReadyAt.Equal(o.NextReadyAt)
}

// NodeState is what the store keeps of one node ID, for operators and tests.
type NodeState struct {
	NodeID NodeID
	Lease  *Lease // nil when free
	// Watermark is the store's own: the latest expiry it ever granted for the node
	// (or one attested by Remove). It is never deleted.
	Watermark time.Time
	// Floor is the watermark floor a store reset raised (zero when none): a new
	// grant's window starts after max(Watermark, Floor).
	Floor            time.Time
	QuarantinedUntil time.Time // zero when never quarantined
	// LastToken is the fencing token of the node's latest grant the store knows of
	// (a restored lease counts); 0 when never granted.
	LastToken uint64
	// Restorable is set by a store reset and cleared by the next grant, restore or
	// contest of the node: while it is set, an authentic claim of a grant the store
	// forgot may restore the lease (RenewParams.Claims).
	Restorable bool
}

// Fenced is the node's effective watermark: max(Watermark, Floor). A new grant's
// NotBefore is Fenced + 1 ms.
func (n NodeState) Fenced() time.Time {
	if n.Floor.After(n.Watermark) {
		return n.Floor
	}
	return n.Watermark
}

// Origin tells how a store generation began.
type Origin string

// Origins of a generation (DESIGN §7).
const (
	OriginFresh     Origin = "fresh"     // initialised by `idkeeper init` (or dev) on an empty store
	OriginRecovered Origin = "recovered" // written by a registry that recovered the store from a reset
)

// Generation identifies one life of a store's data: the sentinel record written at
// initialisation and at every recovery (DESIGN §7). A registry that has seen a
// generation and finds the store without one, or with another, treats the store as
// reset.
type Generation struct {
	ID     string // random; a new one marks a new generation
	Number uint64 // 1 at initialisation, one more at each recovery that wrote a new generation
	Origin Origin
	At     time.Time // when it was written or last recovered (store clock)
}

// IsZero reports whether g is no generation at all.
func (g Generation) IsZero() bool { return g.ID == "" }

// NewGenerationID returns a fresh random generation ID, the one every Store writes:
// 128 bits as 32 hex digits.
func NewGenerationID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return hex.EncodeToString(b)
}

// SkewLevel is the registry's verdict on a requester's clock.
type SkewLevel string

// Skew levels, from DESIGN §3: |skew| > grace/2 warns; skew > grace rejects Alloc.
const (
	SkewOK     SkewLevel = "ok"
	SkewWarn   SkewLevel = "warn"
	SkewReject SkewLevel = "reject"
)

// SkewObservation is the last clock-skew measurement of one requester.
type SkewObservation struct {
	Requester  Requester
	Skew       time.Duration // server now − client now; positive: the client is behind
	Threshold  time.Duration // the grace period in force
	Level      SkewLevel
	ObservedAt time.Time
	RemoteIP   string
	Operation  string // "alloc" or "renew"
}

// APIKey is a stored API key. Only the hash of its secret is kept.
type APIKey struct {
	ID          string // public part of the key, the lookup handle
	Hash        []byte // SHA-256 of the secret part
	Description string
	CreatedAt   time.Time
	// CreatedBy tells who made the key: "user:NAME" (an admin web account,
	// CreatedByUser), "key:ID" (an admin API key, CreatedByKey), "cli" (`idkeeper
	// apikey create --store`, CreatedByCLI), "env" (IDKEEPER_BOOTSTRAP_API_KEY or
	// IDKEEPER_ADMIN_API_KEY, CreatedByEnv). "" is not known: a record stored
	// before the field existed, or a key made without saying.
	CreatedBy string
	ExpiresAt time.Time // zero: never expires
	// MaxNodes is the key's quota: the most node IDs its leases may hold at once;
	// 0 means no quota.
	MaxNodes int
	// Bootstrap marks the key stored from IDKEEPER_BOOTSTRAP_API_KEY: a new bootstrap
	// key retires (revokes) the previous one.
	Bootstrap bool
	// Admin marks a key that may use the admin API (/admin/api/) as well as /v1:
	// manage API keys on a running server. Records stored before it existed read as
	// false.
	Admin      bool
	RevokedAt  time.Time // zero while not revoked; a revoked key authenticates nothing
	LastUsedAt time.Time // updated at most once a minute per replica; zero: never used
}

// Revoked reports whether the key has been revoked.
func (k APIKey) Revoked() bool { return !k.RevokedAt.IsZero() }

// Expired reports whether the key has expired at now.
func (k APIKey) Expired(now time.Time) bool { return !k.ExpiresAt.IsZero() && !now.Before(k.ExpiresAt) }

// Clock tells the time. Tests inject a fake one; production uses time.Now.
type Clock func() time.Time
