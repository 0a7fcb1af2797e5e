package bolt

import (
	"context"
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
	err := s.update(ctx, &g, func(t *txn) error {
		if !t.inPool(node) {
			return idkeeper.ErrNotFound
		}
		id := uint32(node)
		rec, err := t.node(id)
		if err != nil {
			return err
		}
		if rec.place != placeHeld {
			return idkeeper.ErrNotFound
		}
		l, err := t.lease(id)
		if err != nil {
			return err
		}
		if l.token != token {
			return idkeeper.ErrNotFound
		}
		if out, err = l.lease(id); err != nil {
			return err
		}
		rec.watermark = max(rec.watermark, l.expiresAt)
		rec.quarUntil = max(rec.quarUntil, l.expiresAt+grace.Milliseconds())
		rec.restorable = false
		if err := t.release(id, &rec, l); err != nil {
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
