package bolt

import (
	"context"
	"slices"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/internal/leasetx"
)

// Status implements idkeeper.LeaseStore.
func (s *Store) Status(ctx context.Context) (idkeeper.StoreStatus, error) {
	var st idkeeper.StoreStatus
	err := s.view(ctx, func(t *txn) error {
		g, ok, err := t.generation()
		if err != nil {
			return err
		}
		pool, err := t.pool()
		st = idkeeper.StoreStatus{Initialised: ok, Generation: g, Fence: t.fence, Pool: pool, Now: msTime(t.now)}
		return err
	})
	return st, err
}

// Init implements idkeeper.LeaseStore.
func (s *Store) Init(ctx context.Context, pool idkeeper.PoolSpec) (idkeeper.InitResult, error) {
	if err := pool.Validate(); err != nil {
		return idkeeper.InitResult{}, err
	}
	var res idkeeper.InitResult
	err := s.update(ctx, nil, func(t *txn) error {
		g, ok, err := t.generation()
		if err != nil {
			return err
		}
		if ok {
			res.Generation = g
			return t.growTo(pool)
		}
		res = idkeeper.InitResult{Fresh: true, Generation: leasetx.Fresh(t.now)}
		if err := t.growTo(pool); err != nil {
			return err
		}
		return t.meta.Put(keyGeneration, encodeGeneration(res.Generation))
	})
	if err != nil {
		return idkeeper.InitResult{}, err
	}
	if res.Fresh {
		s.log.Info("bolt: initialised a new node pool", "pool", pool.String(), "generation", res.Generation.ID)
	}
	return res, nil
}

// growTo grows the pool to p (stored with p's First and layout when the store has
// none); another First or layout, or a smaller pool, is an INVALID_REQUEST Error
// (idkeeper.CheckPoolChange).
func (t *txn) growTo(p idkeeper.PoolSpec) error {
	if err := t.adopt(p, false); err != nil {
		return err
	}
	return t.grow(p.Nodes)
}

// Grow implements idkeeper.LeaseStore.
func (s *Store) Grow(ctx context.Context, g idkeeper.Guard, pool idkeeper.PoolSpec) error {
	if err := pool.Validate(); err != nil {
		return err
	}
	return s.update(ctx, &g, func(t *txn) error { return t.growTo(pool) })
}

// Reset implements idkeeper.LeaseStore. It never shrinks the pool: a p.Pool.Nodes
// below the stored size leaves the size as it is.
func (s *Store) Reset(ctx context.Context, p idkeeper.ResetParams) (idkeeper.ResetResult, error) {
	if err := p.Validate(); err != nil {
		return idkeeper.ResetResult{}, err
	}
	var res idkeeper.ResetResult
	until := timeMs(p.Until)
	err := s.update(ctx, nil, func(t *txn) error {
		if err := t.adopt(p.Pool, true); err != nil {
			return err
		}
		t.fence = max(t.fence, p.MinFence)
		if err := t.grow(p.Pool.Nodes); err != nil {
			return err
		}
		for i := t.first; i < t.end(); i++ { // uint64: a pool may end at node 2^32−1
			err := t.modify(uint32(i), func(r *nodeRec) {
				r.quarUntil, r.floor, r.restorable = max(r.quarUntil, until), max(r.floor, until), true
			})
			if err != nil {
				return err
			}
		}
		cur, ok, err := t.generation()
		if err != nil {
			return err
		}
		res = leasetx.ResetGeneration(cur, ok, p.Seen, t.now)
		return t.meta.Put(keyGeneration, encodeGeneration(res.Generation))
	})
	if err != nil {
		return idkeeper.ResetResult{}, err
	}
	s.log.Warn("bolt: the store lost writes; every node ID is quarantined and its watermark floor raised",
		"until", p.Until, "minFence", p.MinFence, "generation", res.Generation.Number)
	return res, nil
}

// Alloc implements idkeeper.LeaseStore (leasetx.Alloc).
func (s *Store) Alloc(ctx context.Context, g idkeeper.Guard, p idkeeper.AllocParams) (idkeeper.Grant, error) {
	if err := p.Validate(); err != nil {
		return idkeeper.Grant{}, err
	}
	return ruled(s, ctx, &g, func(t leasetx.Tx) (idkeeper.Grant, error) { return leasetx.Alloc(t, p) })
}

// ruled runs step, a step of the shared lease rules, in one update guarded by
// g (nil: none) (leasetx.Step).
func ruled[T any](s *Store, ctx context.Context, g *idkeeper.Guard, step func(leasetx.Tx) (T, error)) (T, error) {
	run := func(fn func(leasetx.Tx) error) error {
		return s.update(ctx, g, func(t *txn) error { return fn(rules{t}) })
	}
	return leasetx.Step(run, step)
}

// heldBy returns the node IDs the requester with key holds, sorted.
func (t *txn) heldBy(key string) ([]uint32, error) {
	v := t.reqs.Get([]byte(key))
	if v == nil {
		return nil, nil
	}
	return decodeIDs(v)
}

// Renew implements idkeeper.LeaseStore (leasetx.Renew).
func (s *Store) Renew(ctx context.Context, g idkeeper.Guard, p idkeeper.RenewParams) (idkeeper.Grant, error) {
	if err := p.Validate(); err != nil {
		return idkeeper.Grant{}, err
	}
	return ruled(s, ctx, &g, func(t leasetx.Tx) (idkeeper.Grant, error) { return leasetx.Renew(t, p) })
}

// Remove implements idkeeper.LeaseStore (leasetx.Remove).
func (s *Store) Remove(ctx context.Context, g idkeeper.Guard, p idkeeper.RemoveParams) (int, error) {
	if err := p.Validate(); err != nil {
		return 0, err
	}
	return ruled(s, ctx, &g, func(t leasetx.Tx) (int, error) { return leasetx.Remove(t, p) })
}

// RevokeLease implements idkeeper.LeaseStore: one transaction that checks the
// guard, deletes the lease, raises the node's watermark and quarantine and frees
// it into the quarantine index (or ready or cooling, when ExpiresAt + grace has
// passed already).
func (s *Store) RevokeLease(ctx context.Context, g idkeeper.Guard, node idkeeper.NodeID, token uint64, grace time.Duration) (idkeeper.Lease, error) {
	if err := idkeeper.CheckGrace(grace); err != nil {
		return idkeeper.Lease{}, err
	}
	return ruled(s, ctx, &g, func(t leasetx.Tx) (idkeeper.Lease, error) { return leasetx.Revoke(t, node, token, grace) })
}

// release deletes a held node's lease and puts the node at the back of the free
// order. The caller updates the requester index.
func (t *txn) release(id uint32, r *nodeRec, l leaseRec) error {
	if err := t.leases.Delete(nodeKey(id)); err != nil {
		return err
	}
	if err := t.expiry.Delete(timeNodeKey(l.ExpiresAt, id)); err != nil {
		return err
	}
	if err := t.keyHolds(l.KeyID, -1); err != nil {
		return err
	}
	t.held--
	t.seq++
	r.freeSeq = t.seq
	return t.place(id, r)
}

// Reclaim implements idkeeper.LeaseStore.
func (s *Store) Reclaim(ctx context.Context, g idkeeper.Guard, grace time.Duration) (int, error) {
	var n int
	err := s.update(ctx, &g, func(t *txn) error {
		if err := t.promote(); err != nil {
			return err
		}
		cutoff := t.now - grace.Milliseconds()
		for _, k := range collect(t.expiry, func(k []byte) bool { return keyTime(k) < cutoff }, -1) {
			if err := leasetx.Reclaimed(rules{t}, keyNode(k)); err != nil {
				return err
			}
			n++
		}
		return nil
	})
	return n, err
}

// dropHeld takes one node out of a requester's index entry, when it is there.
func (t *txn) dropHeld(key string, id uint32) error {
	ids, err := t.heldBy(key)
	if err != nil || !slices.Contains(ids, id) {
		return err // a Remove dropped the whole entry first
	}
	ids = slices.DeleteFunc(ids, func(x uint32) bool { return x == id })
	if len(ids) == 0 {
		return t.reqs.Delete([]byte(key))
	}
	return t.reqs.Put([]byte(key), encodeIDs(ids))
}

// Quarantine implements idkeeper.LeaseStore.
func (s *Store) Quarantine(ctx context.Context, g idkeeper.Guard, until time.Time, nodes ...idkeeper.NodeID) error {
	ms := timeMs(until)
	return s.update(ctx, &g, func(t *txn) error {
		for _, id := range nodes {
			if !t.inPool(id) {
				return idkeeper.OutsidePool(id)
			}
		}
		for _, id := range nodes {
			if err := t.modify(uint32(id), func(r *nodeRec) { r.quarUntil = max(r.quarUntil, ms) }); err != nil {
				return err
			}
		}
		return nil
	})
}
