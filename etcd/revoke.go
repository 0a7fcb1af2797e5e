package etcd

import (
	"context"
	"fmt"
	"time"

	"github.com/idkeeper/idkeeper"
)

// RevokeLease implements idkeeper.LeaseStore: one transaction that checks the
// guard, deletes the lease, raises the node's watermark and quarantine and frees
// it into the quarantine index (or ready or cooling, when ExpiresAt + grace has
// passed already).
func (s *Store) RevokeLease(ctx context.Context, g idkeeper.Guard, node idkeeper.NodeID, token uint64, grace time.Duration) (idkeeper.Lease, error) {
	if err := idkeeper.CheckGrace(grace); err != nil {
		return idkeeper.Lease{}, err
	}
	var out idkeeper.Lease
	err := s.update(ctx, "revoke lease", &g, nil, func(t *txn) error {
		if !t.meta.inPool(node) {
			return idkeeper.ErrNotFound
		}
		id := uint32(node)
		r, err := t.node(id)
		if err != nil {
			return err
		}
		l := r.lease
		if l == nil || l.token != token {
			return idkeeper.ErrNotFound
		}
		if out, err = l.lease(id); err != nil {
			return err
		}
		if err := t.fetch(s.k.req+l.requester, s.k.keyHeld+l.keyID, s.k.histKey(id, l.token)); err != nil {
			return err
		}
		r.watermark = max(r.watermark, l.expiresAt)
		r.quarUntil = max(r.quarUntil, l.expiresAt+grace.Milliseconds())
		r.restorable = false
		if err := t.release(id, &r); err != nil {
			return err
		}
		if err := t.histLog().End(id, l.token, idkeeper.EndRevoked); err != nil {
			return err
		}
		return t.dropHeld(l.requester, id)
	})
	if err != nil {
		return idkeeper.Lease{}, err
	}
	return out, nil
}

// errNoLease is the error of a node that an index says is held but whose record
// holds no lease: a store that was written by something else.
func errNoLease(id uint32) error {
	return fmt.Errorf("node %d is indexed as held but its record holds no lease", id)
}
