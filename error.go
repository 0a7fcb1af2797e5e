package idkeeper

import (
	"errors"
	"fmt"

	"github.com/idkeeper/idkeeper/internal/plural"
	"github.com/idkeeper/idkeeper/protocol"
)

// Code is a stable, machine-readable error code: what a program branches on
// (protocol.Code). The codes themselves are defined once, in package protocol
// (protocol.CodeNotFound, …), so that the client library shares them without the
// registry's engine; this file holds the registry's sentinel errors and the
// constructors of its errors.
type Code = protocol.Code

// Error is a domain error (protocol.Error): a code for programs, a message for
// people, and optional details that the HTTP layer adds to the problem body as
// extension members.
type Error = protocol.Error

// Unavailable wraps a store failure as STORE_UNAVAILABLE.
func Unavailable(err error) *Error {
	return &Error{Code: protocol.CodeStoreUnavailable, Message: "the lease store is unavailable; retry later", Err: err}
}

// Sentinel errors of the Store contract.
var (
	// ErrNotFound: the record does not exist.
	ErrNotFound = &Error{Code: protocol.CodeNotFound, Message: "not found"}
	// ErrConflict: a record with that identity exists already.
	ErrConflict = &Error{Code: protocol.CodeConflict, Message: "already exists"}
	// ErrStoreReset: a guard found the store reset (ErrGenerationChanged) or missing
	// writes (ErrFenceRegression): a restart without persistence, a failover to a
	// replica that missed writes, a restore. Nothing was written. The registry
	// recovers with Store.Reset and retries.
	ErrStoreReset = errors.New("idkeeper: the store was reset or lost writes")
	// ErrStoreClockSkew: a guard found the store's clock too far from the caller's
	// (Guard.MaxSkew). Nothing was written.
	ErrStoreClockSkew = errors.New("idkeeper: the store's clock disagrees with the registry's")
	// ErrNotInitialised: the store holds no generation; `idkeeper init` creates one.
	ErrNotInitialised = &Error{Code: protocol.CodeStoreNotInitialised,
		Message: "the store is not initialised: run `idkeeper init --store …` once for a new deployment"}
)

// NotOwned is the LEASE_NOT_OWNED Error of a requester whose leases belong to
// another API key. It names neither the other key nor the leases.
func NotOwned() *Error {
	return &Error{Code: protocol.CodeLeaseNotOwned, Message: "the requester's leases belong to another API key"}
}

// Exhausted is the NODE_IDS_EXHAUSTED Error of an Alloc that found fewer than
// requested node IDs allocatable.
func Exhausted(requested, remaining int) *Error {
	return &Error{
		Code:    protocol.CodeNodeIDsExhausted,
		Message: fmt.Sprintf("%s requested, %d allocatable", plural.N(requested, "node ID", "node IDs"), remaining),
		Details: map[string]any{"requested": requested, "remaining": remaining},
	}
}

// CountMismatch is the REQUESTER_COUNT_MISMATCH Error of an Alloc by a requester
// that holds another number of node IDs.
func CountMismatch(held, requested int) *Error {
	return &Error{
		Code:    protocol.CodeRequesterCountMismatch,
		Message: fmt.Sprintf("the requester holds %s and asked for %d; remove them first", plural.N(held, "node ID", "node IDs"), requested),
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
	msg := fmt.Sprintf("the API key may hold %s; it holds %d and asked for %d more", plural.N(maxNodes, "node ID", "node IDs"), held, requested)
	if cooling > 0 {
		msg = fmt.Sprintf("the API key may hold %s; it holds %d (%d of them cooling after its Removes, "+
			"until their watermark passes: send mintedUpTo with Remove to release node IDs at once) and asked for %d more",
			plural.N(maxNodes, "node ID", "node IDs"), held, cooling, requested)
	}
	return &Error{
		Code:    protocol.CodeAPIKeyQuotaExceeded,
		Message: msg,
		Details: map[string]any{"maxNodes": maxNodes, "held": held, "cooling": cooling, "requested": requested},
	}
}
