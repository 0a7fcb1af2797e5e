package idkeeper

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// IdempotencyState is the state of an IdempotencyRecord.
type IdempotencyState uint8

// Record states.
const (
	// IdempotencyInFlight: a request holds the key and is running; its marker
	// lapses at LockedUntil.
	IdempotencyInFlight IdempotencyState = iota + 1
	// IdempotencyCompleted: the response of the request that held the key is
	// stored, to be replayed until ExpiresAt.
	IdempotencyCompleted
)

func (s IdempotencyState) String() string {
	switch s {
	case IdempotencyInFlight:
		return "in-flight"
	case IdempotencyCompleted:
		return "completed"
	}
	return "unknown"
}

// Limits every IdempotencyStore enforces; values outside them are an
// INVALID_REQUEST Error.
const (
	MaxIdempotencyScopeLen       = 1024 // bytes of a scope
	MaxIdempotencyFingerprintLen = 256  // bytes of a fingerprint
	MaxIdempotencyTokenLen       = 128  // bytes of a marker token
	MinIdempotencyOutcome        = 100  // the smallest IdempotencyResult.Outcome
	MaxIdempotencyOutcome        = 999  // the largest IdempotencyResult.Outcome
)

// IdempotencyRecord is what an IdempotencyStore keeps for one scope. Times come
// from the store's clock, truncated to the millisecond.
type IdempotencyRecord struct {
	Scope       string
	Fingerprint string // of the request that holds (or held) the key
	State       IdempotencyState
	// Outcome, Metadata and Body are the stored IdempotencyResult; set when
	// Completed.
	Outcome  int
	Metadata map[string][]string
	Body     []byte
	// CreatedAt is when the request that holds the key began.
	CreatedAt time.Time
	// LockedUntil is when an in-flight marker lapses: a request that crashed does
	// not block its key for longer. Zero once Completed.
	LockedUntil time.Time
	// ExpiresAt is when the record lapses and may be deleted: LockedUntil for an
	// in-flight marker, completion time + ttl for a completed record.
	ExpiresAt time.Time
}

// IdempotencyResult is what Complete stores: the outcome of the operation that held
// the key, which a store keeps as it is given and never interprets. The component
// that uses the store gives the fields their meaning: package idempotency stores an
// HTTP answer, its status as Outcome and its replayable headers as Metadata.
type IdempotencyResult struct {
	Outcome  int                 // a code of three digits: MinIdempotencyOutcome to MaxIdempotencyOutcome
	Metadata map[string][]string // named values kept with the outcome, in any number
	Body     []byte
}

// ErrIdempotencyMarkerLost is returned by IdempotencyStore.Complete when the
// caller's in-flight marker is no longer there: it lapsed (LockedUntil passed),
// was aborted, or another request has taken the key over. Nothing was written.
// The caller must not deliver its own response then; see the idempotency package.
var ErrIdempotencyMarkerLost = errors.New("idkeeper: the idempotency marker has lapsed or was taken over")

// IdempotencyCapError is the refusal of a new record by a store that caps the live
// records of one owner (the Owned views of package idempotency's CountingStore):
// the owner holds MaxRecords live records, the earliest of which lapses in
// RetryAfter seconds. Nothing was written.
type IdempotencyCapError struct {
	MaxRecords int
	RetryAfter int // whole seconds, at least 1
}

// NewIdempotencyCapError returns the refusal for an owner that holds maxRecords
// records, the earliest of which lapses after wait: RetryAfter is wait rounded up
// to whole seconds, at least 1.
func NewIdempotencyCapError(maxRecords int, wait time.Duration) *IdempotencyCapError {
	return &IdempotencyCapError{MaxRecords: maxRecords, RetryAfter: int(max(1, (wait+time.Second-1)/time.Second))}
}

func (e *IdempotencyCapError) Error() string {
	return fmt.Sprintf("idkeeper: the owner holds %d idempotency records, the most allowed; the earliest lapses in %d s",
		e.MaxRecords, e.RetryAfter)
}

// IdempotencyStore keeps the records of the Idempotency-Key component (DESIGN §6):
// one record per scope (caller, operation, key), shared by every process that
// serves the operation. Implementations: bolt (one file per process) and redis
// (shared by any number of processes).
//
// A record is live until ExpiresAt; a record that is not live is treated exactly
// as an absent one, whether or not the store has deleted it yet.
//
// An in-flight marker belongs to the token its Begin was given; only that token
// completes or aborts it. Every method is safe for concurrent use, by goroutines
// and by processes sharing the store, and is atomic: it applies entirely or not at
// all. Arguments that the ValidateIdempotency functions reject are an
// INVALID_REQUEST Error; a store that caps an owner's records refuses a Begin
// beyond the cap with an *IdempotencyCapError; any other error is a failing store.
type IdempotencyStore interface {
	// Begin claims scope for a request with the given fingerprint. When scope has
	// no live record it writes an in-flight marker owned by token (CreatedAt =
	// now, LockedUntil = ExpiresAt = now+lockFor) and reports started = true with
	// a nil record. Otherwise it changes nothing and returns the live record,
	// whatever its fingerprint: comparing fingerprints is the caller's decision.
	Begin(ctx context.Context, scope, fingerprint, token string, lockFor time.Duration) (existing *IdempotencyRecord, started bool, err error)

	// Complete replaces token's in-flight marker of scope by the completed record
	// of res, live until now+ttl, keeping the marker's fingerprint and CreatedAt.
	// When scope holds no live in-flight marker of token it writes nothing and
	// returns ErrIdempotencyMarkerLost.
	Complete(ctx context.Context, scope, token string, res IdempotencyResult, ttl time.Duration) error

	// Abort deletes token's in-flight marker of scope, live or lapsed, so the next
	// request with the key runs afresh: for outcomes that must not be replayed. It
	// does nothing, and returns nil, when scope holds anything else.
	Abort(ctx context.Context, scope, token string) error
}

// ValidateIdempotencyBegin checks the arguments of IdempotencyStore.Begin; stores
// call it first.
func ValidateIdempotencyBegin(scope, fingerprint, token string, lockFor time.Duration) error {
	if err := ValidateIdempotencyAbort(scope, token); err != nil {
		return err
	}
	if fingerprint == "" || len(fingerprint) > MaxIdempotencyFingerprintLen {
		return Invalidf("fingerprint", "an idempotency fingerprint must have 1 to %d bytes", MaxIdempotencyFingerprintLen)
	}
	return validIdempotencyDuration("lockFor", lockFor)
}

// ValidateIdempotencyComplete checks the arguments of IdempotencyStore.Complete,
// including an Outcome of MinIdempotencyOutcome to MaxIdempotencyOutcome; stores
// call it first.
func ValidateIdempotencyComplete(scope, token string, res IdempotencyResult, ttl time.Duration) error {
	if err := ValidateIdempotencyAbort(scope, token); err != nil {
		return err
	}
	if res.Outcome < MinIdempotencyOutcome || res.Outcome > MaxIdempotencyOutcome {
		return Invalidf("outcome", "an idempotency outcome has three digits, %d to %d, got %d",
			MinIdempotencyOutcome, MaxIdempotencyOutcome, res.Outcome)
	}
	return validIdempotencyDuration("ttl", ttl)
}

// ValidateIdempotencyAbort checks the arguments of IdempotencyStore.Abort; stores
// call it first.
func ValidateIdempotencyAbort(scope, token string) error {
	switch {
	case scope == "" || len(scope) > MaxIdempotencyScopeLen:
		return Invalidf("scope", "an idempotency scope must have 1 to %d bytes", MaxIdempotencyScopeLen)
	case token == "" || len(token) > MaxIdempotencyTokenLen:
		return Invalidf("token", "an idempotency token must have 1 to %d bytes", MaxIdempotencyTokenLen)
	}
	return nil
}

func validIdempotencyDuration(field string, d time.Duration) error {
	if d < time.Millisecond {
		return Invalidf(field, "%s must be at least 1ms, got %v", field, d)
	}
	return nil
}
