package idkeeper

import (
	"errors"
	"fmt"
	"strconv"
)

// Code is a stable, machine-readable error code: what a program branches on.
// Services send it as the `code` member of a problem+json body; the HTTP status
// and title that go with each code are internal/problem's. The codes below are
// the domain's; the idempotency and gateway packages define their own.
type Code string

// Error codes of the registry and of every service.
const (
	CodeInvalidRequest         Code = "INVALID_REQUEST"          // a request member is missing or wrong; Error.Field names it
	CodeAPIKeyMissing          Code = "API_KEY_MISSING"          // no API key sent
	CodeAPIKeyInvalid          Code = "API_KEY_INVALID"          // unknown or revoked API key
	CodeAPIKeyExpired          Code = "API_KEY_EXPIRED"          // the API key has expired
	CodeIPNotAllowed           Code = "IP_NOT_ALLOWED"           // the client's address is not on the allow-list
	CodeLeaseNotOwned          Code = "LEASE_NOT_OWNED"          // the leases belong to another API key
	CodeAdminKeyRequired       Code = "ADMIN_KEY_REQUIRED"       // the route needs an admin API key (APIKey.Admin)
	CodeNotFound               Code = "NOT_FOUND"                // no such record or route
	CodeMethodNotAllowed       Code = "METHOD_NOT_ALLOWED"       // the route exists, not with that method
	CodeConflict               Code = "CONFLICT"                 // a record with that identity exists already
	CodeClockSkewTooLarge      Code = "CLOCK_SKEW_TOO_LARGE"     // the requester's clock is too far from the registry's
	CodeRequesterCountMismatch Code = "REQUESTER_COUNT_MISMATCH" // the requester holds another number of node IDs
	CodeNodeIDsExhausted       Code = "NODE_IDS_EXHAUSTED"       // fewer node IDs allocatable than requested
	CodeAPIKeyQuotaExceeded    Code = "API_KEY_QUOTA_EXCEEDED"   // the API key's quota of node IDs is reached
	CodeUnsupportedMediaType   Code = "UNSUPPORTED_MEDIA_TYPE"   // the request body is not application/json
	CodeBodyTooLarge           Code = "BODY_TOO_LARGE"           // the request body exceeds the limit
	CodeCountTooLarge          Code = "COUNT_TOO_LARGE"          // count above the most one request may ask; Details "maxCount"
	CodeStoreUnavailable       Code = "STORE_UNAVAILABLE"        // the store failed or timed out; retry
	CodeNotReady               Code = "NOT_READY"                // the service cannot serve yet; retry
	CodeStoreNotInitialised    Code = "STORE_NOT_INITIALISED"    // the store holds no generation: run `idkeeper init`
	CodeStoreRecovering        Code = "STORE_RECOVERING"         // the registry recovers from a store reset; retry
	CodePoolMismatch           Code = "POOL_MISMATCH"            // the store's node range or layout is not the registry's: re-initialise deliberately
	CodeStoreClockSkew         Code = "STORE_CLOCK_SKEW"         // the store's clock disagrees with the registry's
	CodeClockUnverified        Code = "CLOCK_UNVERIFIED"         // the clock agent no longer vouches for this replica's clock: restart it
	CodeLoginFailed            Code = "LOGIN_FAILED"             // unknown user, wrong password, disabled or throttled: one error; Details "retryAfterSeconds" when throttled
	CodeLoginThrottleFull      Code = "LOGIN_THROTTLE_FULL"      // the login throttle's table is full of live entries: a login from a new address is refused for now; Details "retryAfterSeconds"
	CodePasswordTooCommon      Code = "PASSWORD_TOO_COMMON"      // a new password is on the list of common passwords; Error.Field names it
	CodeSessionExpired         Code = "SESSION_EXPIRED"          // the admin session is unknown, timed out or voided: log in again
	CodeForbidden              Code = "FORBIDDEN"                // the account's role may not do that
	CodeInternal               Code = "INTERNAL"                 // anything else; shows nothing of its cause
)

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
		Message: fmt.Sprintf("%s requested, %d allocatable", plural(requested, "node ID", "node IDs"), remaining),
		Details: map[string]any{"requested": requested, "remaining": remaining},
	}
}

// CountMismatch is the REQUESTER_COUNT_MISMATCH Error of an Alloc by a requester
// that holds another number of node IDs.
func CountMismatch(held, requested int) *Error {
	return &Error{
		Code:    CodeRequesterCountMismatch,
		Message: fmt.Sprintf("the requester holds %s and asked for %d; remove them first", plural(held, "node ID", "node IDs"), requested),
		Details: map[string]any{"held": held, "requested": requested},
	}
}

// QuotaExceeded is the API_KEY_QUOTA_EXCEEDED Error of an Alloc that would take
// the key's leases past its quota.
func QuotaExceeded(maxNodes, held, requested int) *Error {
	return QuotaExceededCooling(maxNodes, held, 0, requested)
}

// QuotaExceededCooling is the API_KEY_QUOTA_EXCEEDED Error of a key whose charge,
// held node IDs (its leases' plus cooling ones charged to it), leaves no room for
// requested more under maxNodes; cooling is the part of held that is cooling
// after the key's Removes (LeaseStore.Remove).
func QuotaExceededCooling(maxNodes, held, cooling, requested int) *Error {
	msg := fmt.Sprintf("the API key may hold %s; it holds %d and asked for %d more", plural(maxNodes, "node ID", "node IDs"), held, requested)
	if cooling > 0 {
		msg = fmt.Sprintf("the API key may hold %s; it holds %d (%d of them cooling after its Removes, "+
			"until their watermark passes: send mintedUpTo with Remove to release node IDs at once) and asked for %d more",
			plural(maxNodes, "node ID", "node IDs"), held, cooling, requested)
	}
	return &Error{
		Code:    CodeAPIKeyQuotaExceeded,
		Message: msg,
		Details: map[string]any{"maxNodes": maxNodes, "held": held, "cooling": cooling, "requested": requested},
	}
}

// plural is n and the noun: one when n is 1, else many ("1 node ID", "2 node
// IDs"). internal/plural is the same for the packages that may import it.
func plural(n int, one, many string) string {
	if n == 1 || n == -1 {
		return strconv.Itoa(n) + " " + one
	}
	return strconv.Itoa(n) + " " + many
}
