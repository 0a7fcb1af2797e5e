package idempotency

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idkeeper/idkeeper/protocol"
)

// State is the state of an Record.
type State uint8

// Record states.
const (
	// InFlight: a request holds the key and is running; its marker
	// lapses at LockedUntil.
	InFlight State = iota + 1
	// Completed: the response of the request that held the key is
	// stored, to be replayed until ExpiresAt.
	Completed
)

func (s State) String() string {
	switch s {
	case InFlight:
		return "in-flight"
	case Completed:
		return "completed"
	}
	return "unknown"
}

// Limits every Store enforces; values outside them are an
// INVALID_REQUEST Error.
const (
	MaxScopeLen       = 1024 // bytes of a scope
	MaxFingerprintLen = 256  // bytes of a fingerprint
	MaxTokenLen       = 128  // bytes of a marker token
	MinOutcome        = 100  // the smallest Stored.Outcome
	MaxOutcome        = 999  // the largest Stored.Outcome
)

// Record is what an Store keeps for one scope. Times come
// from the store's clock, truncated to the millisecond.
type Record struct {
	Scope       string
	Fingerprint string // of the request that holds (or held) the key
	State       State
	// Outcome, Metadata and Body are the stored Stored; set when
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

// Stored is what Complete stores: the outcome of the operation that held
// the key, which a store keeps as it is given and never interprets. The component
// that uses the store gives the fields their meaning: package idempotency stores an
// HTTP answer, its status as Outcome and its replayable headers as Metadata.
type Stored struct {
	Outcome  int                 // a code of three digits: MinOutcome to MaxOutcome
	Metadata map[string][]string // named values kept with the outcome, in any number
	Body     []byte
}

// ErrMarkerLost is returned by Store.Complete when the
// caller's in-flight marker is no longer there: it lapsed (LockedUntil passed),
// was aborted, or another request has taken the key over. Nothing was written.
// The caller must not deliver its own response then; see the idempotency package.
var ErrMarkerLost = errors.New("idkeeper: the idempotency marker has lapsed or was taken over")

// CapError is the refusal of a new record by a store that caps the live
// records of one owner (the Owned views of package idempotency's CountingStore):
// the owner holds MaxRecords live records, the earliest of which lapses in
// RetryAfter seconds. Nothing was written.
type CapError struct {
	MaxRecords int
	RetryAfter int // whole seconds, at least 1
}

// NewCapError returns the refusal for an owner that holds maxRecords
// records, the earliest of which lapses after wait: RetryAfter is wait rounded up
// to whole seconds, at least 1.
func NewCapError(maxRecords int, wait time.Duration) *CapError {
	return &CapError{MaxRecords: maxRecords, RetryAfter: int(max(1, (wait+time.Second-1)/time.Second))}
}

func (e *CapError) Error() string {
	return fmt.Sprintf("idkeeper: the owner holds %d idempotency records, the most allowed; the earliest lapses in %d s",
		e.MaxRecords, e.RetryAfter)
}

// Store keeps the records of the Idempotency-Key component (DESIGN §6):
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
// beyond the cap with an *CapError; any other error is a failing store.
type Store interface {
	// Begin claims scope for a request with the given fingerprint. When scope has
	// no live record it writes an in-flight marker owned by token (CreatedAt =
	// now, LockedUntil = ExpiresAt = now+lockFor) and reports started = true with
	// a nil record. Otherwise it changes nothing and returns the live record,
	// whatever its fingerprint: comparing fingerprints is the caller's decision.
	Begin(ctx context.Context, scope, fingerprint, token string, lockFor time.Duration) (existing *Record, started bool, err error)

	// Complete replaces token's in-flight marker of scope by the completed record
	// of res, live until now+ttl, keeping the marker's fingerprint and CreatedAt.
	// When scope holds no live in-flight marker of token it writes nothing and
	// returns ErrMarkerLost.
	Complete(ctx context.Context, scope, token string, res Stored, ttl time.Duration) error

	// Abort deletes token's in-flight marker of scope, live or lapsed, so the next
	// request with the key runs afresh: for outcomes that must not be replayed. It
	// does nothing, and returns nil, when scope holds anything else.
	Abort(ctx context.Context, scope, token string) error
}

// ValidateBegin checks the arguments of Store.Begin; stores
// call it first.
func ValidateBegin(scope, fingerprint, token string, lockFor time.Duration) error {
	if err := ValidateAbort(scope, token); err != nil {
		return err
	}
	if fingerprint == "" || len(fingerprint) > MaxFingerprintLen {
		return protocol.Invalidf("fingerprint", "an idempotency fingerprint must have 1 to %d bytes", MaxFingerprintLen)
	}
	return validIdempotencyDuration("lockFor", lockFor)
}

// ValidateComplete checks the arguments of Store.Complete,
// including an Outcome of MinOutcome to MaxOutcome; stores
// call it first.
func ValidateComplete(scope, token string, res Stored, ttl time.Duration) error {
	if err := ValidateAbort(scope, token); err != nil {
		return err
	}
	if res.Outcome < MinOutcome || res.Outcome > MaxOutcome {
		return protocol.Invalidf("outcome", "an idempotency outcome has three digits, %d to %d, got %d",
			MinOutcome, MaxOutcome, res.Outcome)
	}
	return validIdempotencyDuration("ttl", ttl)
}

// ValidateAbort checks the arguments of Store.Abort; stores
// call it first.
func ValidateAbort(scope, token string) error {
	switch {
	case scope == "" || len(scope) > MaxScopeLen:
		return protocol.Invalidf("scope", "an idempotency scope must have 1 to %d bytes", MaxScopeLen)
	case token == "" || len(token) > MaxTokenLen:
		return protocol.Invalidf("token", "an idempotency token must have 1 to %d bytes", MaxTokenLen)
	}
	return nil
}

func validIdempotencyDuration(field string, d time.Duration) error {
	if d < time.Millisecond {
		return protocol.Invalidf(field, "%s must be at least 1ms, got %v", field, d)
	}
	return nil
}
