package client

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/idkeeper/idkeeper/protocol"
)

// Errors of a Session. Issuing also returns the generator's errors unchanged:
// snowflake.ErrBeforeWindow (the node ID's window has not opened yet),
// snowflake.ErrWindowEnded (the wall clock is past the lease's expiry),
// snowflake.ErrClockBackwards, snowflake.ErrClockStalled and
// snowflake.ErrTimestampOutOfRange; match them with errors.Is.
var (
	// ErrNotOpen: Open has not obtained a lease yet.
	ErrNotOpen = errors.New("idkeeper client: session is not open: no lease is held yet")
	// ErrClosed: Close was called; issuing stays blocked.
	ErrClosed = errors.New("idkeeper client: session is closed")
	// ErrLeaseLost is wrapped by every error that ends a session for good after it
	// held a lease: the lease expired on the local monotonic clock, Renew answered
	// that the server holds nothing (or fewer or other node IDs), or a renewed lease
	// had already expired by the local clock. Issuing is blocked from that moment.
	ErrLeaseLost = errors.New("idkeeper client: lease lost")
	// ErrInvalidGrant is wrapped by the error Open returns when the server's Alloc
	// answer fails validation (DESIGN §4): a layout whose widths are not all positive
	// or do not add up to 63, a node ID outside 0..2^nodeBits−1, a lease already
	// expired by the local clock, or not the node IDs asked for. Open does not retry.
	ErrInvalidGrant = errors.New("idkeeper client: invalid grant")
)

// errLeaseExpired is returned by issuing once the lease deadline has passed. It is
// built once so that refusing does not allocate.
var errLeaseExpired = fmt.Errorf("%w: the lease expired on the local monotonic clock", ErrLeaseLost)

// ServerError is an answer of the registry other than 200: the status, the members
// of its problem+json body (Code empty when the body was not problem+json), and the
// body itself as received (at most 4 KiB) for logs.
//
// A ServerError with a Code unwraps to the *protocol.Error (idkeeper.Error) the
// server sent, so that ErrorCode and errors.As work on both sides of the wire.
type ServerError struct {
	Op     string // "alloc", "renew" or "remove"
	Server string // the base URL of the replica that answered, any password redacted
	Status int
	Code   protocol.Code
	Detail string // the problem's detail, else its title
	Field  string // the request member at fault, for INVALID_REQUEST
	// Details are the problem's extension members (such as "remaining" of
	// NODE_IDS_EXHAUSTED) as encoding/json decodes them: numbers are float64.
	Details map[string]any
	Body    string
}

// LogValue logs the answer as fields (slog.LogValuer): server, status, code,
// detail, field and each extension member under its own name, instead of the
// raw body.
func (e *ServerError) LogValue() slog.Value {
	attrs := []slog.Attr{slog.String("server", e.Server), slog.Int("status", e.Status)}
	if e.Code != "" {
		attrs = append(attrs, slog.String("code", string(e.Code)))
	}
	if e.Detail != "" {
		attrs = append(attrs, slog.String("detail", e.Detail))
	}
	if e.Field != "" {
		attrs = append(attrs, slog.String("field", e.Field))
	}
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range e.Details {
			if !yield(k) {
				return
			}
		}
	}) {
		attrs = append(attrs, slog.Any(k, e.Details[k]))
	}
	return slog.GroupValue(attrs...)
}

func (e *ServerError) Error() string {
	var b strings.Builder
	who := "server"
	if e.Server != "" {
		who += " " + e.Server
	}
	fmt.Fprintf(&b, "idkeeper client: %s: %s answered %d", e.Op, who, e.Status)
	if e.Code != "" {
		b.WriteString(" " + string(e.Code))
	}
	if e.Detail != "" {
		b.WriteString(": " + e.Detail)
	}
	return b.String()
}

// Unwrap returns the server's error as a *protocol.Error with the problem's code,
// detail (as Message), field and details; nil when the answer carried no code.
func (e *ServerError) Unwrap() error {
	if e.Code == "" {
		return nil
	}
	return &protocol.Error{Code: e.Code, Message: e.Detail, Field: e.Field, Details: e.Details}
}

// transient reports whether an Alloc failing with e is worth retrying: a server or
// store failure (5xx, 429), a clock the operator may still correct (409
// CLOCK_SKEW_TOO_LARGE) and a pool that may free up (409 NODE_IDS_EXHAUSTED). Every
// other answer (400, 401, 403, 404, 409 REQUESTER_COUNT_MISMATCH, …) is a
// configuration or program error that retrying cannot fix.
func (e *ServerError) transient() bool {
	switch {
	case e.Status >= 500, e.Status == 429, e.Status == 408:
		return true
	case e.Code == protocol.CodeClockSkewTooLarge, e.Code == protocol.CodeNodeIDsExhausted,
		e.Code == protocol.CodeAPIKeyQuotaExceeded:
		// Other holders may give node IDs (or the key's quota) back.
		return true
	}
	return false
}

// MalformedError is a 200 answer whose body does not follow the HTTP contract. It is
// retried like a transport error: it proves nothing about the lease.
type MalformedError struct {
	Op  string
	Err error
}

func (e *MalformedError) Error() string {
	return fmt.Sprintf("idkeeper client: %s: malformed answer: %v", e.Op, e.Err)
}

func (e *MalformedError) Unwrap() error { return e.Err }
