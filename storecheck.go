package idkeeper

import (
	"fmt"
	"math"
	"time"

	"github.com/idkeeper/idkeeper/protocol"
)

// The checks every Store makes of its arguments before it reads or writes
// anything, so that the stores refuse the same calls with the same Error (an
// INVALID_REQUEST naming the field, with one text), and the errors of the lease
// rules that every store returns in the same shape.

// MaxPoolNodes is the most node IDs a Store's pool may hold.
const MaxPoolNodes = math.MaxUint32

// CheckPoolSize returns an INVALID_REQUEST Error unless nodes is a pool size:
// 1..MaxPoolNodes.
func CheckPoolSize(nodes int) error {
	if nodes < 1 || nodes > MaxPoolNodes {
		return protocol.Invalidf("nodes", "a pool holds 1..%d node IDs, not %d", uint64(MaxPoolNodes), nodes)
	}
	return nil
}

// ShrinkRefused is the INVALID_REQUEST Error of Init or Grow asked for a pool of
// nodes when the store holds stored node IDs, more.
func ShrinkRefused(stored uint64, nodes int) error {
	return protocol.Invalidf("nodes", "the store holds %d node IDs; a pool of %d would drop some", stored, nodes)
}

// OutsidePool is the INVALID_REQUEST Error of a node ID that the pool does not
// hold: below its First, or at or past First + Nodes.
func OutsidePool(id NodeID) error {
	return protocol.Invalidf("nodes", "node ID %d is outside the pool", id)
}

// FenceCeiling is the error of a grant that would take the fencing counter, at
// fence, past MaxFencingToken by handing out count tokens. It is no INVALID_REQUEST:
// the request is fine, the store has run out of tokens.
func FenceCeiling(fence uint64, count int) error {
	return fmt.Errorf("the fencing counter %d cannot grow by %d past 2^53-1", fence, count)
}

// Validate returns an INVALID_REQUEST Error when p cannot be an Alloc: an invalid
// Requester, a Count below 1, a First below 1 ms or a negative MaxNodes.
func (p AllocParams) Validate() error {
	if err := p.Requester.Validate(); err != nil {
		return err
	}
	switch {
	case p.Count < 1:
		return protocol.Invalidf("count", "count must be at least 1, got %d", p.Count)
	case p.First < time.Millisecond:
		return protocol.Invalidf("first", "a new lease lasts at least 1ms, not %v", p.First)
	case p.MaxNodes < 0:
		return protocol.Invalidf("maxNodes", "a quota must not be negative, got %d", p.MaxNodes)
	}
	return p.Client.Validate()
}

// Validate returns an INVALID_REQUEST Error when p cannot be a Renew: an invalid
// Requester, a Duration below 1 ms or a negative Grace. Claims are not checked:
// one that can never have been granted is ignored (see Claim.Possible).
func (p RenewParams) Validate() error {
	if err := p.Requester.Validate(); err != nil {
		return err
	}
	switch {
	case p.Duration < time.Millisecond:
		return protocol.Invalidf("duration", "a lease lasts at least 1ms, not %v", p.Duration)
	case p.Grace < 0:
		return protocol.Invalidf("grace", "the grace period must not be negative, got %v", p.Grace)
	}
	return nil
}

// Validate returns an INVALID_REQUEST Error when p cannot be a Remove: an invalid
// Requester.
func (p RemoveParams) Validate() error { return p.Requester.Validate() }

// Validate returns an INVALID_REQUEST Error when p cannot be a Reset: a pool that
// is not valid (PoolSpec.Validate) or a MinFence above MaxFencingToken.
func (p ResetParams) Validate() error {
	if err := p.Pool.Validate(); err != nil {
		return err
	}
	if p.MinFence > MaxFencingToken {
		return protocol.Invalidf("minFence", "a fencing counter of %d is above the last token 2^53-1", p.MinFence)
	}
	return nil
}

// Possible reports whether c can describe a grant: a node ID of at least 0 and a
// token in 1..MaxFencingToken. Renew ignores a claim that is not, like one that is
// not live or not news.
func (c Claim) Possible() bool {
	return c.NodeID >= 0 && c.Token >= 1 && c.Token <= MaxFencingToken
}

// CheckGrace returns an INVALID_REQUEST Error unless grace, a grace period, is not
// negative.
func CheckGrace(grace time.Duration) error {
	if grace < 0 {
		return protocol.Invalidf("grace", "the grace period must not be negative, got %v", grace)
	}
	return nil
}
