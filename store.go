package idkeeper

import (
	"context"
	"time"
)

// Store is the persistence contract the Registry runs on. Implementations: bolt
// (bbolt, embedded) and redis. internal/storetest is the one suite every
// implementation passes; a behaviour difference between stores is a bug.
//
// Every method is safe for concurrent use, by goroutines and by several processes
// sharing one store. Every mutating method is atomic: it applies entirely or not at
// all. Errors are a *Error with a Code (the lease errors below), ErrNotFound,
// ErrConflict, ErrStoreReset, or any other error for a failing store, which the
// Registry reports as STORE_UNAVAILABLE.
type Store interface {
	LeaseStore
	LockStore
	KeyStore
	SkewStore
	// Ping checks that the store answers.
	Ping(ctx context.Context) error
	// Close releases the store's resources.
	Close() error
}

// InitResult is the answer of LeaseStore.Init.
type InitResult struct {
	Sentinel string // the store's sentinel, now adopted by this Store value
	Fresh    bool   // true when Init created the pool and the sentinel
}

// ResetParams tell LeaseStore.Reset how to make a reset store safe again.
type ResetParams struct {
	Nodes int // pool size, as for Init
	// Until is the quarantine end and watermark floor for every node ID:
	// now + lease duration + grace.
	Until time.Time
	// MinFence is the lowest value the fencing counter may have afterwards: the
	// highest token this process has handed out or seen.
	MinFence uint64
}

// LeaseStore keeps node IDs, leases, watermarks and quarantines.
//
// All lease arithmetic uses the store's clock (Now), truncated to the millisecond.
//
// State of a node ID: it is held by one lease, or free. A free node is quarantined
// (QuarantinedUntil > now: not allocatable), cooling (watermark ≥ now: allocatable,
// but its holder must wait until NotBefore to mint), or ready (watermark < now).
// Free node IDs are handed out least-recently-freed first, ready ones before cooling
// ones; a cooling one is chosen by lowest watermark. Node IDs that were never held
// (a fresh pool, pool growth, nodes created by Reset) are freed in NodeID order at
// the time they are created; node IDs freed by one call are freed in NodeID order.
//
// A never-used node's watermark is the zero time.Time, so its first grant's
// NotBefore is the zero time + 1 ms: no lower bound for minting.
//
// Bad arguments (count < 1, an invalid Requester, nodes < 1) return an
// INVALID_REQUEST Error. A mutating call before Init or Reset returns a plain error.
//
// The watermark of a node ID is never deleted and never falls below an ExpiresAt the
// store has granted, except through Remove with mintedUpTo (see Remove).
//
// After Init or Reset, a Store value remembers the sentinel it adopted. Every
// mutating method (Alloc, Renew, Remove, Reclaim, Quarantine) first checks, in the
// same atomic step, that the store's sentinel still equals it; if not it writes
// nothing and returns ErrStoreReset.
type LeaseStore interface {
	// Now is the store's clock (the time authority), truncated to the millisecond.
	Now(ctx context.Context) (time.Time, error)

	// Init prepares the pool of node IDs 0..nodes−1 and adopts the store's sentinel.
	// On an empty store it creates the pool (every node ready, watermark zero) and a
	// new random sentinel, and reports Fresh. On an initialised store it adopts the
	// existing sentinel, adding node IDs when nodes grew; a smaller pool than the
	// stored one returns an INVALID_REQUEST Error and changes nothing.
	Init(ctx context.Context, nodes int) (InitResult, error)

	// Reset makes a store that lost writes safe and adopts its new sentinel. old is
	// the sentinel this process last adopted. If the store's sentinel is missing or
	// equals old, Reset, in one atomic step: creates missing node IDs as Init does;
	// raises every node's QuarantinedUntil and watermark to at least p.Until; raises
	// the fencing counter to at least p.MinFence; writes a new sentinel; and reports
	// recovered = true. Leases are kept (their holders may be real); a held node's
	// quarantine applies when it is freed. A p.Nodes below the stored pool size keeps
	// the stored pool. If the store holds another sentinel (another replica has
	// recovered already), it only raises the fencing counter, adopts that sentinel
	// and reports recovered = false.
	Reset(ctx context.Context, old string, p ResetParams) (sentinel string, recovered bool, err error)

	// Alloc grants count node IDs to r.
	//
	// If r holds leases already: when it holds exactly count, Alloc returns them,
	// raising each ExpiresAt to at least now+first (never shortening a lease) and each
	// watermark to at least that ExpiresAt, with tokens and NotBefore unchanged; when
	// it holds another number it returns a REQUESTER_COUNT_MISMATCH Error (Details
	// "held", "requested") and changes nothing.
	//
	// Otherwise, when fewer than count node IDs are allocatable (free and not
	// quarantined at now) it returns a NODE_IDS_EXHAUSTED Error (Details "requested",
	// "remaining") and grants nothing. Else it picks count node IDs in the order
	// described on LeaseStore and for each: increments the fencing counter and takes
	// the new value as FencingToken; NotBefore = watermark + 1 ms; ExpiresAt =
	// now+first; GrantedAt = now; watermark = max(watermark, ExpiresAt). A cooling node
	// whose watermark lies past now+first gets NotBefore > ExpiresAt: an empty window
	// until the holder's first Renew, which clients send at once (DESIGN §4).
	//
	// Leases come back sorted by NodeID; Grant.Now is the store's now.
	Alloc(ctx context.Context, r Requester, count int, first time.Duration) (Grant, error)

	// Renew extends every lease of r, expired or not, as long as it has not been
	// reclaimed: ExpiresAt = max(ExpiresAt, now+d), RenewedAt = now, watermark =
	// max(watermark, ExpiresAt). It returns the leases sorted by NodeID, an empty
	// list when r holds nothing.
	Renew(ctx context.Context, r Requester, d time.Duration) (Grant, error)

	// Remove releases every lease of r at once and returns how many there were (0
	// when none). When mintedUpTo is not zero, the holder attests it minted nothing
	// after it and never will; each released node's watermark then becomes
	// max(min(mintedUpTo, ExpiresAt), NotBefore − 1 ms, QuarantinedUntil if later than
	// now), so a released node ID is reusable at once. When mintedUpTo is zero the
	// watermark stays. A released node goes to the back of the free order.
	Remove(ctx context.Context, r Requester, mintedUpTo time.Time) (int, error)

	// Reclaim deletes the leases whose ExpiresAt + grace lies before now, each checked
	// again in the same atomic step that deletes it (a lease renewed meanwhile stays),
	// frees their node IDs (to the back of the free order, watermark unchanged) and
	// returns how many it deleted. Reclaiming is idempotent: a second run at once
	// deletes nothing.
	Reclaim(ctx context.Context, grace time.Duration) (int, error)

	// Quarantine raises the QuarantinedUntil of the given node IDs to at least until
	// (never lowers it). A held node keeps its lease; the quarantine applies when it is
	// freed. Node IDs outside the pool return an INVALID_REQUEST Error.
	Quarantine(ctx context.Context, until time.Time, nodes ...NodeID) error

	// Counts returns the state of the pool at the store's now, without scanning the
	// pool: O(log n + k) at most, k being the leases in grace.
	Counts(ctx context.Context) (Counts, error)

	// Leases returns every lease in the store, expired ones included, sorted by NodeID.
	Leases(ctx context.Context) ([]Lease, error)

	// Node returns the state of one node ID; ErrNotFound outside the pool.
	Node(ctx context.Context, id NodeID) (NodeState, error)
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
}

// KeyStore keeps API keys.
type KeyStore interface {
	// CreateAPIKey stores k; ErrConflict when its ID exists.
	CreateAPIKey(ctx context.Context, k APIKey) error
	// APIKey returns the key with that ID; ErrNotFound when there is none.
	APIKey(ctx context.Context, id string) (APIKey, error)
	// APIKeys returns every key, sorted by ID.
	APIKeys(ctx context.Context) ([]APIKey, error)
	// DeleteAPIKey deletes a key; ErrNotFound when there is none.
	DeleteAPIKey(ctx context.Context, id string) error
}

// SkewStore keeps the last clock-skew observation per requester.
type SkewStore interface {
	// RecordSkew replaces the requester's observation; it lapses at the store's now + ttl.
	RecordSkew(ctx context.Context, o SkewObservation, ttl time.Duration) error
	// SkewObservations returns the observations that have not lapsed, sorted by
	// requester key, dropping lapsed ones as it goes.
	SkewObservations(ctx context.Context) ([]SkewObservation, error)
}
