// Package idemowner is the Owned view of idempotency.CountingStore written once
// for the stores that keep an owner with each idempotency record: the view
// checks its owner and cap, then hands every call to the store with them.
package idemowner

import (
	"context"
	"time"

	"github.com/idkeeper/idkeeper/idempotency"
	"github.com/idkeeper/idkeeper/protocol"
)

// Store is what a store implements for its Owned views: the methods of
// idempotency.Store for the records of owner, at most maxRecords live
// ones of that owner in Begin (0: no cap).
type Store interface {
	BeginOwned(ctx context.Context, owner string, maxRecords int, scope, fingerprint, token string, lockFor time.Duration) (*idempotency.Record, bool, error)
	CompleteOwned(ctx context.Context, owner, scope, token string, res idempotency.Stored, ttl time.Duration) error
	AbortOwned(ctx context.Context, owner, scope, token string) error
}

// View is s's view of owner's records (idempotency.CountingStore.Owned): an
// owner longer than idempotency.MaxScopeLen bytes, or a negative cap, is
// an INVALID_REQUEST Error from every method.
func View(s Store, owner string, maxRecords int) idempotency.Store {
	return &view{s: s, owner: owner, max: maxRecords}
}

type view struct {
	s     Store
	owner string
	max   int
}

func (v *view) valid() error {
	switch {
	case len(v.owner) > idempotency.MaxScopeLen:
		return protocol.Invalidf("owner", "an idempotency owner has at most %d bytes", idempotency.MaxScopeLen)
	case v.max < 0:
		return protocol.Invalidf("maxRecords", "the cap of an owner's records is not negative, got %d", v.max)
	}
	return nil
}

func (v *view) Begin(ctx context.Context, scope, fingerprint, token string, lockFor time.Duration) (*idempotency.Record, bool, error) {
	if err := v.valid(); err != nil {
		return nil, false, err
	}
	return v.s.BeginOwned(ctx, v.owner, v.max, scope, fingerprint, token, lockFor)
}

func (v *view) Complete(ctx context.Context, scope, token string, res idempotency.Stored, ttl time.Duration) error {
	if err := v.valid(); err != nil {
		return err
	}
	return v.s.CompleteOwned(ctx, v.owner, scope, token, res, ttl)
}

func (v *view) Abort(ctx context.Context, scope, token string) error {
	if err := v.valid(); err != nil {
		return err
	}
	return v.s.AbortOwned(ctx, v.owner, scope, token)
}
