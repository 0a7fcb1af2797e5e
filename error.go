package idkeeper

import (
	"errors"
	"fmt"
)

// Code is a stable, machine-readable error code, sent as the `code` member of a
// problem+json body.
type Code string

// Error codes. Their HTTP status is given by Status.
const (
	CodeInvalidRequest         Code = "INVALID_REQUEST"          // 400
	CodeAPIKeyMissing          Code = "API_KEY_MISSING"          // 401
	CodeAPIKeyInvalid          Code = "API_KEY_INVALID"          // 401
	CodeAPIKeyExpired          Code = "API_KEY_EXPIRED"          // 401
	CodeIPNotAllowed           Code = "IP_NOT_ALLOWED"           // 403
	CodeLeaseNotOwned          Code = "LEASE_NOT_OWNED"          // 403
	CodeNotFound               Code = "NOT_FOUND"                // 404
	CodeMethodNotAllowed       Code = "METHOD_NOT_ALLOWED"       // 405
	CodeConflict               Code = "CONFLICT"                 // 409
	CodeClockSkewTooLarge      Code = "CLOCK_SKEW_TOO_LARGE"     // 409
	CodeRequesterCountMismatch Code = "REQUESTER_COUNT_MISMATCH" // 409
	CodeNodeIDsExhausted       Code = "NODE_IDS_EXHAUSTED"       // 409
	CodeAPIKeyQuotaExceeded    Code = "API_KEY_QUOTA_EXCEEDED"   // 409
	CodeUnsupportedMediaType   Code = "UNSUPPORTED_MEDIA_TYPE"   // 415
	CodeBodyTooLarge           Code = "BODY_TOO_LARGE"           // 413
	CodeStoreUnavailable       Code = "STORE_UNAVAILABLE"        // 503
	CodeNotReady               Code = "NOT_READY"                // 503
	CodeStoreNotInitialised    Code = "STORE_NOT_INITIALISED"    // 503
	CodeStoreRecovering        Code = "STORE_RECOVERING"         // 503
	CodeStoreClockSkew         Code = "STORE_CLOCK_SKEW"         // 503
	CodeInternal               Code = "INTERNAL"                 // 500
)

// Error codes of the Idempotency-Key component (package idempotency), sent by
// every service that uses it.
const (
	// CodeIdempotencyKeyRequired (400): the operation requires an Idempotency-Key
	// and the request has none.
	CodeIdempotencyKeyRequired Code = "IDEMPOTENCY_KEY_REQUIRED"
	// CodeIdempotencyKeyInvalid (400): the Idempotency-Key is malformed or repeated.
	CodeIdempotencyKeyInvalid Code = "IDEMPOTENCY_KEY_INVALID"
	// CodeIdempotencyInProgress (409, Retry-After): a request with the same key
	// and the same fingerprint is still running.
	CodeIdempotencyInProgress Code = "IDEMPOTENCY_REQUEST_IN_PROGRESS"
	// CodeIdempotencyKeyReused (422): the key was first used for another request.
	CodeIdempotencyKeyReused Code = "IDEMPOTENCY_KEY_REUSED_WITH_DIFFERENT_REQUEST"
	// CodeIdempotencyRecordsExhausted (429, Retry-After): the caller holds as many
	// idempotency records as the service keeps for one caller; a new key is refused
	// until one of them lapses. The problem carries maxRecords.
	CodeIdempotencyRecordsExhausted Code = "IDEMPOTENCY_RECORDS_EXHAUSTED"
)

// Error codes of the ID gateway (package gateway).
const (
	// CodeCountTooLarge (400): count is above the gateway's largest; the problem
	// carries a maxCount member.
	CodeCountTooLarge Code = "COUNT_TOO_LARGE"
	// CodeIssuingUnavailable (503, Retry-After): the gateway cannot mint now: it
	// holds no lease yet, has lost it, a node ID is still cooling, or the clock is
	// unusable. No ID of the request was handed out.
	CodeIssuingUnavailable Code = "ISSUING_UNAVAILABLE"
)

// Status is the HTTP status that goes with a code; it covers every code above,
// and is 500 for an unknown one.
func (c Code) Status() int {
	switch c {
	case CodeInvalidRequest, CodeIdempotencyKeyRequired, CodeIdempotencyKeyInvalid, CodeCountTooLarge:
		return 400
	case CodeAPIKeyMissing, CodeAPIKeyInvalid, CodeAPIKeyExpired:
		return 401
	case CodeIPNotAllowed, CodeLeaseNotOwned:
		return 403
	case CodeNotFound:
		return 404
	case CodeMethodNotAllowed:
		return 405
	case CodeConflict, CodeClockSkewTooLarge, CodeRequesterCountMismatch, CodeNodeIDsExhausted, CodeIdempotencyInProgress,
		CodeAPIKeyQuotaExceeded:
		return 409
	case CodeBodyTooLarge:
		return 413
	case CodeUnsupportedMediaType:
		return 415
	case CodeIdempotencyKeyReused:
		return 422
	case CodeIdempotencyRecordsExhausted:
		return 429
	case CodeStoreUnavailable, CodeNotReady, CodeIssuingUnavailable, CodeStoreNotInitialised, CodeStoreRecovering,
		CodeStoreClockSkew:
		return 503
	}
	return 500
}

// Error is a domain error: a code for programs, a message for people, and optional
// details that the HTTP layer adds to the problem body as extension members.
type Error struct {
	Code    Code
	Message string
	Field   string         // the request field at fault, for INVALID_REQUEST
	Details map[string]any // extension members, e.g. skew and threshold
	Err     error          // the cause, never shown to clients
}

func (e *Error) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%s: %s: %v", e.Code, e.Message, e.Err)
	}
	return fmt.Sprintf("%s: %s", e.Code, e.Message)
}

func (e *Error) Unwrap() error { return e.Err }

// Errorf returns an Error with a formatted message.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Invalidf returns an INVALID_REQUEST Error naming field.
func Invalidf(field, format string, args ...any) *Error {
	return &Error{Code: CodeInvalidRequest, Field: field, Message: fmt.Sprintf(format, args...)}
}

// Unavailable wraps a store failure as STORE_UNAVAILABLE.
func Unavailable(err error) *Error {
	return &Error{Code: CodeStoreUnavailable, Message: "the lease store is unavailable; retry later", Err: err}
}

// ErrorCode returns the code of the first *Error in err's chain, "" for nil and
// INTERNAL for any other error.
func ErrorCode(err error) Code {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return CodeInternal
}

// ErrorMessage returns the human message of the first *Error in err's chain, or a
// generic one that leaks nothing for any other error.
func ErrorMessage(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Message
	}
	return "internal error"
}

// Sentinel errors of the Store contract.
var (
	// ErrNotFound: the record does not exist.
	ErrNotFound = &Error{Code: CodeNotFound, Message: "not found"}
	// ErrConflict: a record with that identity exists already.
	ErrConflict = &Error{Code: CodeConflict, Message: "already exists"}
	// ErrStoreReset: a guard found the store reset (ErrGenerationChanged) or missing
	// writes (ErrFenceRegression): a restart without persistence, a failover to a
	// replica that missed writes, a restore. Nothing was written. The registry
	// recovers with Store.Reset and retries.
	ErrStoreReset = errors.New("idkeeper: the store was reset or lost writes")
	// ErrStoreClockSkew: a guard found the store's clock too far from the caller's
	// (Guard.MaxSkew). Nothing was written.
	ErrStoreClockSkew = errors.New("idkeeper: the store's clock disagrees with the registry's")
	// ErrNotInitialised: the store holds no generation; `idkeeper init` creates one.
	ErrNotInitialised = &Error{Code: CodeStoreNotInitialised,
		Message: "the store is not initialised: run `idkeeper init --store …` once for a new deployment"}
)

// NotOwned is the LEASE_NOT_OWNED Error of a requester whose leases belong to
// another API key. It names neither the other key nor the leases.
func NotOwned() *Error {
	return &Error{Code: CodeLeaseNotOwned, Message: "the requester's leases belong to another API key"}
}

// Exhausted is the NODE_IDS_EXHAUSTED Error of an Alloc that found fewer than
// requested node IDs allocatable.
func Exhausted(requested, remaining int) *Error {
	return &Error{
		Code:    CodeNodeIDsExhausted,
		Message: fmt.Sprintf("%d node IDs requested, %d allocatable", requested, remaining),
		Details: map[string]any{"requested": requested, "remaining": remaining},
	}
}

// CountMismatch is the REQUESTER_COUNT_MISMATCH Error of an Alloc by a requester
// that holds another number of node IDs.
func CountMismatch(held, requested int) *Error {
	return &Error{
		Code:    CodeRequesterCountMismatch,
		Message: fmt.Sprintf("the requester holds %d node IDs and asked for %d; remove them first", held, requested),
		Details: map[string]any{"held": held, "requested": requested},
	}
}

// QuotaExceeded is the API_KEY_QUOTA_EXCEEDED Error of an Alloc that would take
// the key's leases past its quota.
func QuotaExceeded(maxNodes, held, requested int) *Error {
	return &Error{
		Code: CodeAPIKeyQuotaExceeded,
		Message: fmt.Sprintf("the API key may hold %d node IDs; it holds %d and asked for %d more",
			maxNodes, held, requested),
		Details: map[string]any{"maxNodes": maxNodes, "held": held, "requested": requested},
	}
}
