package idkeeper

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idkeeper/idkeeper/protocol"
)

// IdentifiedStore is a Store that can say where it keeps its data: the identity a
// replica's state file records, so that the state of one store is never taken for
// evidence about another (issue #29). Two Stores with equal identities share their
// data; the identity holds no secret (no password, no token), and does not change
// when the data does (a wiped or restored store keeps it). The bolt, redis and etcd
// stores implement it.
type IdentifiedStore interface {
	Store
	// Identity is, e.g., "bolt:/var/lib/idkeeper/idkeeper.db",
	// "redis://10.0.0.5:6379/0 prefix idk:", "etcd://e1:2379,e2:2379/idkeeper/".
	Identity() string
}

// Store is the persistence contract the Registry runs on. Implementations: bolt
// (bbolt, embedded), redis and etcd (issue #17: the lease store so far; its admin
// records, snapshots and command-line form come next). internal/harness/storetest is the
// one suite every implementation passes; a behaviour difference between stores
// is a bug.
//
// Every method is safe for concurrent use, by goroutines and by several processes
// sharing one store. Every mutating method is atomic: it applies entirely or not at
// all. Errors are a *Error with a Code (the lease errors below), ErrNotFound,
// ErrConflict, an error wrapping ErrStoreReset or ErrStoreClockSkew, or any other
// error for a failing store, which the Registry reports as STORE_UNAVAILABLE.
type Store interface {
	LeaseStore
	LockStore
	KeyStore
	SkewStore
	HistoryStore
	// Ping checks that the store answers.
	Ping(ctx context.Context) error
	// Close releases the store's resources.
	Close() error
}

// Guard is what every guarded (mutating) lease method checks first, in the same
// atomic step as its writes (DESIGN §7). When a check fails the method writes
// nothing.
type Guard struct {
	// Generation is the ID of the generation the caller adopted. A store without a
	// generation, or with another one, fails with an error wrapping ErrStoreReset.
	Generation string
	// MinFence is the highest fencing token the caller knows was handed out. A store
	// whose fencing counter is below it lost writes: an error wrapping ErrStoreReset.
	// A new grant's token is therefore strictly greater than MinFence.
	MinFence uint64
	// Now is the caller's own clock when it is not zero: a store whose clock differs
	// from it by more than MaxSkew fails with an error wrapping ErrStoreClockSkew.
	Now     time.Time
	MaxSkew time.Duration
}

// StoreStatus is what a store tells about itself in one read.
type StoreStatus struct {
	Initialised bool       // false: no generation (an empty or wiped store)
	Generation  Generation // zero when not initialised
	Fence       uint64     // the fencing counter: the highest token handed out
	// Pool is the stored pool: its First, size and layout (DefaultLayout for a
	// store initialised before layouts were stored). Pool.Nodes is 0, and Pool
	// zero, when the store holds no pool (not initialised).
	Pool PoolSpec
	Now  time.Time // the store's clock (the time authority)
}

// InitResult is the answer of LeaseStore.Init.
type InitResult struct {
	Generation Generation
	Fresh      bool // true when Init created the pool and the first generation
}

// ResetParams tell LeaseStore.Reset how to make a reset store safe again.
type ResetParams struct {
	// Seen is the generation the caller adopted before; zero when it has adopted
	// none.
	Seen Generation
	// Pool is the pool, as for Init: a store without a pool gets it; a smaller
	// stored pool of the same space grows, a larger one stays as it is; a stored
	// pool with another First or layout refuses the reset (PoolMismatch) and
	// nothing changes.
	Pool PoolSpec
	// Until is the quarantine end and watermark floor for every node ID:
	// now + lease duration + grace.
	Until time.Time
	// MinFence is the lowest value the fencing counter may have afterwards: the
	// highest token the caller has handed out or seen. At most MaxFencingToken.
	MinFence uint64
}

// ResetResult is the answer of LeaseStore.Reset.
type ResetResult struct {
	Generation Generation // the store's generation afterwards, to adopt
	// NewGeneration is true when Reset wrote a new generation (the store had none,
	// or the one the caller had seen), false when it kept another replica's.
	NewGeneration bool
}

// AllocParams ask LeaseStore.Alloc for Count node IDs.
type AllocParams struct {
	Requester Requester
	KeyID     string        // the owner of the new leases (the authenticated API key)
	Count     int           // at least 1
	First     time.Duration // length of a new lease
	// MaxNodes is the key's quota: when positive, the node IDs the key's leases
	// hold plus those cooling from its Removes (LeaseStore.Remove) may be at most
	// this many after the grant. The Registry fills it with the key's own quota or
	// the server-wide default (Config.KeyMaxNodesDefault).
	MaxNodes int
	// Client is what the client reported about itself, for the lease history
	// of a new grant (HistoryStore).
	Client ClientInfo
}

// Claim is an authentic statement that a lease was granted (a verified receipt,
// DESIGN §7): node, token and window as the holder last learned them.
type Claim struct {
	NodeID    NodeID
	Token     uint64
	NotBefore time.Time
	ExpiresAt time.Time
}

// RenewParams ask LeaseStore.Renew to extend the leases of Requester.
type RenewParams struct {
	Requester Requester
	KeyID     string        // must own every lease of Requester
	Duration  time.Duration // the lease duration
	// Grace is the cleanup grace period, for the quarantine of a contested node.
	Grace time.Duration
	// Claims are the requester's verified receipts. A claim is live when its
	// ExpiresAt is not before now, and it is news when its Token is greater than
	// the node's LastToken: a grant the store has forgotten. A live claim that is
	// news restores or contests the node; every other claim is ignored.
	Claims []Claim
}

// RemoveParams ask LeaseStore.Remove to release the leases of Requester.
type RemoveParams struct {
	Requester Requester
	KeyID     string // must own every lease of Requester
	// MintedUpTo is the highest timestamp the holder minted, after draining; zero
	// when unknown.
	MintedUpTo time.Time
}

// LeaseStore keeps node IDs, leases, watermarks and quarantines.
//
// All lease arithmetic uses the store's clock (Now), truncated to the millisecond.
//
// State of a node ID: it is held by one lease, or free. A free node is quarantined
// (QuarantinedUntil > now: not allocatable), cooling (fenced watermark ≥ now:
// allocatable, but its holder must wait until NotBefore to mint), or ready (fenced
// watermark < now). The fenced watermark is max(Watermark, Floor) (NodeState). Free
// node IDs are handed out least-recently-freed first, ready ones before cooling ones;
// a cooling one is chosen by lowest fenced watermark. Node IDs that were never held
// (a fresh pool, pool growth, nodes created by Reset) are freed in NodeID order at
// the time they are created; node IDs freed by one call are freed in NodeID order.
//
// A never-used node's watermark is the zero time.Time, so its first grant's
// NotBefore is the zero time + 1 ms: no lower bound for minting.
//
// Bad arguments return the INVALID_REQUEST Error of the shared checks
// (AllocParams.Validate, RenewParams.Validate, RemoveParams.Validate,
// ResetParams.Validate, PoolSpec.Validate, CheckGrace; before the guard is checked)
// or of the checks against the stored pool (PoolMismatch, ShrinkRefused,
// OutsidePool; after it), and change nothing. A claim that is not Possible is
// ignored.
//
// The pool (PoolSpec) is the node IDs First..First+Nodes−1; First and the layout
// are stored with it when it is created and never change afterwards: a node ID
// below First or at or past First+Nodes is outside the pool.
//
// The watermark of a node ID is never deleted and never falls below an ExpiresAt the
// store has granted, except through Remove with mintedUpTo (see Remove).
//
// Guarded methods (Grow, Alloc, Renew, Remove, Reclaim, Quarantine, RevokeLease)
// check their Guard first, in the same atomic step as their writes. Ownership: a
// lease belongs to the KeyID that allocated it; Alloc, Renew and Remove of a
// requester that holds a lease of another key return a LEASE_NOT_OWNED Error and
// change nothing.
type LeaseStore interface {
	// Now is the store's clock (the time authority), truncated to the millisecond.
	Now(ctx context.Context) (time.Time, error)

	// Status reads the generation, the fencing counter, the pool (PoolSpec) and the
	// clock in one step. It never writes.
	Status(ctx context.Context) (StoreStatus, error)

	// Init initialises an empty store: it creates the pool of node IDs
	// pool.First..pool.First+pool.Nodes−1 (every node ready, watermark zero, freed
	// in NodeID order), stores pool.First and pool's layout with it, creates
	// generation 1 with origin fresh, and reports Fresh. On a store that holds a pool
	// it checks pool against the stored one (CheckPoolChange): another First or
	// layout returns PoolMismatch, a smaller size ShrinkRefused, and nothing changes;
	// else it changes nothing but the pool size, which it grows when pool.Nodes is
	// larger. Only `idkeeper init` (and dev, on its own embedded store) calls it: a
	// registry never initialises a store by itself.
	Init(ctx context.Context, pool PoolSpec) (InitResult, error)

	// Grow adds node IDs up to pool.Nodes (from the stored pool's end on, in NodeID
	// order), as Init does on an initialised store: another First or layout than
	// the stored one returns PoolMismatch, a smaller pool ShrinkRefused.
	Grow(ctx context.Context, g Guard, pool PoolSpec) error

	// Reset makes a store that lost writes safe, in one atomic step: it creates the
	// pool (or the missing node IDs) as Init does (p.Pool; a stored pool with
	// another First or layout returns PoolMismatch and changes nothing); raises every node's Floor and
	// QuarantinedUntil to at least p.Until and sets Restorable, held nodes included
	// (a held node's quarantine applies when it is freed); and raises the fencing
	// counter to at least p.MinFence. Leases are kept: their holders may be real.
	// When the store has no generation, or p.Seen's, it writes a new one (a new ID,
	// Number max(stored, p.Seen) + 1, origin recovered); when it has another (another
	// replica recovered it, or it was initialised anew), it keeps that one's ID and
	// Number and sets its origin to recovered. Either way it returns the generation
	// to adopt. Reset is not guarded.
	Reset(ctx context.Context, p ResetParams) (ResetResult, error)

	// Alloc grants p.Count node IDs to p.Requester.
	//
	// If the requester holds leases already: when it holds exactly Count, Alloc
	// returns them, raising each ExpiresAt to at least now+First (never shortening a
	// lease) and each watermark to at least that ExpiresAt, with tokens and NotBefore
	// unchanged; when it holds another number it returns a REQUESTER_COUNT_MISMATCH
	// Error (Details "held", "requested") and changes nothing.
	//
	// Otherwise: when MaxNodes > 0 and the key's charge — the node IDs its leases
	// hold plus the node IDs charged to it for cooling (see Remove) — is more than
	// MaxNodes − Count, it returns an API_KEY_QUOTA_EXCEEDED Error (Details
	// "maxNodes", "held" (the charge), "cooling" (its cooling part), "requested"); when fewer than Count node IDs are allocatable (free and
	// not quarantined at now) it returns a NODE_IDS_EXHAUSTED Error (Details
	// "requested", "remaining"); a grant that would take the fencing counter past
	// MaxFencingToken fails with a plain error. Nothing is granted then. Else it picks
	// Count node IDs in the order described on LeaseStore and for each: increments
	// the fencing counter and takes the new value as FencingToken and LastToken;
	// NotBefore = fenced watermark + 1 ms; ExpiresAt = now+First; GrantedAt = now;
	// KeyID = p.KeyID; Watermark = max(Watermark, ExpiresAt); Restorable cleared. A
	// cooling node whose fenced watermark lies past now+First gets NotBefore >
	// ExpiresAt: an empty window until the holder's first Renew, which clients send
	// at once (DESIGN §4).
	//
	// Leases come back sorted by NodeID; Grant.Now is the store's now.
	Alloc(ctx context.Context, g Guard, p AllocParams) (Grant, error)

	// Renew first handles p.Claims, in NodeID order, the live ones that are news
	// (see RenewParams): a claim on a free node that is Restorable restores the lease
	// for the requester and key — token Claim.Token, NotBefore = max(Claim.NotBefore,
	// Watermark + 1 ms) (the store's own watermark, not the Floor), ExpiresAt =
	// max(Claim.ExpiresAt, now+Duration), GrantedAt = now, LastToken = Token,
	// Restorable cleared — and lists it in Grant.Restored; a claim on a node held by
	// another requester contests it: that lease is deleted, the watermark raised to
	// both ExpiresAts, the node quarantined until that watermark + Grace, LastToken
	// raised to the claim's token, Restorable cleared, and the node listed in
	// Grant.Contested, so neither claimant gets it.
	//
	// It then extends every lease of the requester, expired or not, as long as it
	// has not been reclaimed: ExpiresAt = max(ExpiresAt, now+Duration), RenewedAt =
	// now, watermark = max(watermark, ExpiresAt), and returns them sorted by NodeID,
	// an empty list when the requester holds nothing.
	Renew(ctx context.Context, g Guard, p RenewParams) (Grant, error)

	// Remove releases every lease of p.Requester at once and returns how many there
	// were (0 when none). When MintedUpTo is not zero, the holder attests it minted
	// nothing after it and never will; each released node's watermark then becomes
	// max(min(MintedUpTo, ExpiresAt), NotBefore − 1 ms, QuarantinedUntil if later
	// than now), so a released node ID is reusable at once. When MintedUpTo is zero
	// the watermark stays. The Floor never changes. A released node goes to the back
	// of the free order.
	//
	// Cooling charge: a released node whose fenced watermark is at or after now
	// once released (it is cooling, or quarantined with a watermark ahead) is
	// charged to p.KeyID until that fenced watermark passes: while now ≤ it, the
	// node counts against the key's quota in Alloc (AllocParams.MaxNodes) and in
	// KeyCooling, unless it was granted (or restored) since, which ends the charge.
	// A later raise of the node's Floor (Reset) does not extend the charge: the key
	// did not cause it. A node released ready (fenced watermark before now: a
	// Remove with MintedUpTo that lets it be reused at once) is charged to nobody.
	// Reclaim, RevokeLease and a contest charge nobody. A snapshot does not carry
	// charges and a load (snapshot.Store.LoadSnapshot) drops them: after a restore
	// the whole pool is quarantined anyway.
	Remove(ctx context.Context, g Guard, p RemoveParams) (int, error)

	// Reclaim deletes the leases whose ExpiresAt + grace lies before now, each checked
	// again in the same atomic step that deletes it (a lease renewed meanwhile stays),
	// frees their node IDs (to the back of the free order, watermark unchanged) and
	// returns how many it deleted. Reclaiming is idempotent: a second run at once
	// deletes nothing.
	Reclaim(ctx context.Context, g Guard, grace time.Duration) (int, error)

	// Quarantine raises the QuarantinedUntil of the given node IDs to at least until
	// (never lowers it). A held node keeps its lease; the quarantine applies when it is
	// freed. Node IDs outside the pool return an INVALID_REQUEST Error.
	Quarantine(ctx context.Context, g Guard, until time.Time, nodes ...NodeID) error

	// RevokeLease ends the lease on node whose FencingToken is token at once, for an
	// operator (DESIGN §3), whoever holds it and whichever key owns it, and returns
	// the lease as it was. Its holder may still mint until the lease's ExpiresAt: it
	// learns of the revocation only at its next Renew, whose answer then lacks the
	// node. So, in one atomic step, the lease is deleted; the node's watermark is
	// raised to at least the lease's ExpiresAt (it is already); its QuarantinedUntil
	// is raised to at least ExpiresAt + grace (never lowered), so no Alloc grants it
	// before then, and a later grant's NotBefore lies after ExpiresAt; Restorable is
	// cleared; LastToken stays, so a claim of the revoked grant is not news and
	// neither restores nor contests the node (RenewParams); the Floor never changes.
	// The node goes to the back of the free order and counts as Quarantined until
	// ExpiresAt + grace, then as ready or cooling as its fenced watermark says. A
	// lease whose ExpiresAt has passed (in grace, not reclaimed yet) is revoked the
	// same way. When the node holds no lease with that token (another lease, none,
	// a node outside the pool) it returns ErrNotFound and changes nothing. A
	// negative grace returns an INVALID_REQUEST Error (CheckGrace).
	RevokeLease(ctx context.Context, g Guard, node NodeID, token uint64, grace time.Duration) (Lease, error)

	// Counts returns the state of the pool at the store's now, without scanning the
	// pool: O(log n + k) at most, k being the leases in grace.
	Counts(ctx context.Context) (Counts, error)

	// Leases returns every lease in the store, expired ones included, sorted by NodeID.
	Leases(ctx context.Context) ([]Lease, error)

	// Node returns the state of one node ID; ErrNotFound outside the pool (and on a
	// store that is not initialised).
	Node(ctx context.Context, id NodeID) (NodeState, error)

	// KeyHoldings returns how many node IDs the leases of each API key hold, keys
	// holding none left out.
	KeyHoldings(ctx context.Context) (map[string]int, error)

	// KeyCooling returns how many node IDs are charged to each API key for cooling
	// at the store's now (see Remove), keys charged with none left out. It never
	// writes. A key's quota counts KeyHoldings + KeyCooling.
	KeyCooling(ctx context.Context) (map[string]int, error)
}

// Lock is a held job lock.
type Lock struct {
	Name     string
	Owner    string
	LockedAt time.Time // store clock
	Until    time.Time // the lock lapses by itself then (lock-at-most-for)
}

// LockStore keeps job locks, timed by the store's clock, for the periodic jobs that
// must run on one replica at a time.
type LockStore interface {
	// TryLock takes the lock name for owner until now+atMostFor when it is free or its
	// Until has been reached (a lock lapses at Until). It returns ok = false, the
	// current holder's Lock, and changes nothing, when another owner (or the same
	// owner, from an earlier run) holds it.
	TryLock(ctx context.Context, name, owner string, atMostFor time.Duration) (l Lock, ok bool, err error)
	// Unlock ends owner's hold on name: when LockedAt + atLeastFor is still ahead the
	// lock is kept until then (lock-at-least-for), else it is deleted. It does nothing,
	// and reports held = false, unless owner holds a lock that has not lapsed.
	Unlock(ctx context.Context, name, owner string, atLeastFor time.Duration) (held bool, err error)
	// Locks returns every lock that has not lapsed at the store's now (now before
	// its Until), sorted by Name: the holders operators see. A lock kept past its
	// Unlock by atLeastFor is listed until it lapses. It changes nothing.
	Locks(ctx context.Context) ([]Lock, error)
}

// KeyStore keeps API keys.
type KeyStore interface {
	// CreateAPIKey stores k; ErrConflict when its ID exists.
	CreateAPIKey(ctx context.Context, k APIKey) error
	// APIKey returns the key with that ID; ErrNotFound when there is none.
	APIKey(ctx context.Context, id string) (APIKey, error)
	// APIKeys returns every key, revoked ones included, sorted by ID.
	APIKeys(ctx context.Context) ([]APIKey, error)
	// RevokeAPIKey sets the key's RevokedAt to at unless it is revoked already;
	// ErrNotFound when there is none. The record stays, for operators.
	RevokeAPIKey(ctx context.Context, id string, at time.Time) error
	// TouchAPIKey raises the key's LastUsedAt to at (never lowers it); a missing
	// key is no error.
	TouchAPIKey(ctx context.Context, id string, at time.Time) error
	// UpdateAPIKey changes the key's expiry and quota as u says (to the
	// millisecond), in one atomic read-modify-write, and returns the key as it is
	// afterwards; its other fields stay. ErrNotFound when there is none;
	// ErrConflict, changing nothing, when the key is revoked: a revoked key stays
	// revoked and its record is history. The store trusts u: its caller checks it
	// first (KeyUpdate.Validate).
	UpdateAPIKey(ctx context.Context, id string, u KeyUpdate) (APIKey, error)
}

// KeyUpdate tells KeyStore.UpdateAPIKey what to change of a key; a nil field
// stays as it is.
type KeyUpdate struct {
	// ExpiresAt is the new expiry; a pointer to the zero time: the key never
	// expires.
	ExpiresAt *time.Time
	// MaxNodes is the new quota (APIKey.MaxNodes); 0: none. A quota below the node
	// IDs the key holds takes none of them away: it only refuses new ones.
	MaxNodes *int
}

// SkewStore keeps the last clock-skew observation per requester.
type SkewStore interface {
	// RecordSkew replaces the requester's observation; it lapses at the store's now + ttl.
	RecordSkew(ctx context.Context, o SkewObservation, ttl time.Duration) error
	// SkewObservations returns the observations that have not lapsed, sorted by
	// requester key, dropping lapsed ones as it goes.
	SkewObservations(ctx context.Context) ([]SkewObservation, error)
}

// ReplicatedStore is the optional interface of a Store whose data set carries a
// replication ID that changes when the data set may have been replaced: a replica
// promoted, a server restarted (Redis: master_replid). The Registry reads it at
// start and on every reset probe, keeps the last one it judged in its replica
// state, and treats a change as a store reset (DESIGN §7) unless the store vouches
// that no acknowledged write can have been lost. A store without it (bolt) is
// judged by its generation and fencing counter alone.
type ReplicatedStore interface {
	// ReplicationID returns the replication ID of the data set the store serves
	// now: non-empty, the same on every call until the data set changes.
	ReplicationID(ctx context.Context) (string, error)
	// ReplicationChangeSafe reports whether the change from prev to the current
	// replication ID cannot have lost a write the store acknowledged; why says
	// which case applied, for the log. An unchanged ID is safe. err is set, and
	// safe false, only when the store could not be asked.
	ReplicationChangeSafe(ctx context.Context, prev string) (safe bool, why string, err error)
}

// Reasons a guard fails, wrapped with ErrStoreReset by every store, so the Registry
// can log why.
var (
	// ErrGenerationChanged: the store has no generation, or not the adopted one.
	ErrGenerationChanged = errors.New("the store's generation is missing or changed")
	// ErrFenceRegression: the store's fencing counter is below a token handed out.
	ErrFenceRegression = errors.New("the store's fencing counter is below a token already handed out")
)

// Check applies g to a store's state read in the atomic step that is about to
// write: its generation ID ("" when it has none), its fencing counter and its now.
// It returns nil, or an error wrapping ErrStoreReset (and ErrGenerationChanged or
// ErrFenceRegression) or ErrStoreClockSkew.
func (g Guard) Check(generation string, fence uint64, now time.Time) error {
	switch {
	case generation == "" || generation != g.Generation:
		return fmt.Errorf("%w: %w (adopted %q, found %q)", ErrStoreReset, ErrGenerationChanged, g.Generation, generation)
	case fence < g.MinFence:
		return fmt.Errorf("%w: %w (counter %d, token %d handed out)", ErrStoreReset, ErrFenceRegression, fence, g.MinFence)
	case !g.Now.IsZero() && now.Sub(protocol.Millis(g.Now)).Abs() > g.MaxSkew:
		return fmt.Errorf("%w: the store reads %s, the registry %s (at most %s apart)",
			ErrStoreClockSkew, now.UTC().Format(time.RFC3339Nano), g.Now.UTC().Format(time.RFC3339Nano), g.MaxSkew)
	}
	return nil
}
