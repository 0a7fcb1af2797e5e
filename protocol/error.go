package protocol

import (
	"errors"
	"fmt"
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
