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

// Alloc implements idkeeper.LeaseStore.
func (s *Store) Alloc(ctx context.Context, g idkeeper.Guard, p idkeeper.AllocParams) (idkeeper.Grant, error) {
	if err := p.Validate(); err != nil {
		return idkeeper.Grant{}, err
	}
	var gr idkeeper.Grant
	err := s.update(ctx, &g, func(t *txn) error {
		if err := t.promote(); err != nil {
			return err
		}
		key := p.Requester.Key()
		exp := t.now + p.First.Milliseconds()
		held, err := t.owned(key, p.KeyID)
		if err != nil {
			return err
		}
		if len(held) > 0 {
			if len(held) != p.Count {
				return idkeeper.CountMismatch(len(held), p.Count)
			}
			for _, id := range held {
				if err := t.extend(id, exp, false); err != nil {
					return err
				}
			}
			if gr, err = t.grant(held); err != nil {
				return err
			}
			return t.histExtendAll(gr.Leases)
		}
		keyHeld := func() (int, error) { return t.keyHeldBy(p.KeyID), nil }
		cooling := func() (int, error) { return t.keyCooling(p.KeyID) }
		if err := leasetx.Admit(p, keyHeld, cooling, int(t.nodeCount-t.held-t.quarantineSize), t.fence); err != nil {
			return err
		}
		ids, err := t.pick(p.Count)
		if err != nil {
			return err
		}
		for _, id := range ids {
			t.fence++
			if err := t.take(id, leaseRec{ExpiresAt: exp, GrantedAt: t.now, RenewedAt: zeroMs, Token: t.fence,
				Requester: key, KeyID: p.KeyID}, true); err != nil {
				return err
			}
		}
		slices.Sort(ids)
		if err := t.reqs.Put([]byte(key), encodeIDs(ids)); err != nil {
			return err
		}
		if gr, err = t.grant(ids); err != nil {
			return err
		}
		for _, l := range gr.Leases {
			if err := t.histLog().Grant(l, p.Client); err != nil {
				return err
			}
		}
		return nil
	})
	return gr, err
}

// histExtendAll sets the window end of each lease's record to its expiry.
func (t *txn) histExtendAll(ls []idkeeper.Lease) error {
	for _, l := range ls {
		if err := t.histLog().Extend(uint32(l.NodeID), l.FencingToken, timeMs(l.ExpiresAt)); err != nil {
			return err
		}
	}
	return nil
}

// owned returns the node IDs the requester with key holds, sorted, or
// LEASE_NOT_OWNED when one of them belongs to another API key.
func (t *txn) owned(key, keyID string) ([]uint32, error) {
	ids, err := t.heldBy(key)
	if err != nil {
		return nil, err
	}
	for _, id := range ids {
		l, err := t.lease(id)
		if err != nil {
			return nil, err
		}
		if l.KeyID != keyID {
			return nil, idkeeper.NotOwned()
		}
	}
	return ids, nil
}

// take gives a free node to l's requester: a new grant (NotBefore after the fenced
// watermark) when fresh, else a restored lease whose NotBefore l already carries.
// The caller updates the requester index.
func (t *txn) take(id uint32, l leaseRec, fresh bool) error {
	r, err := t.node(id)
	if err != nil {
		return err
	}
	if err := t.unplace(id, &r); err != nil {
		return err
	}
	n, l := leasetx.Taken(r.tx(), l, fresh)
	r.set(n)
	if err := t.putNode(id, r); err != nil {
		return err
	}
	if err := t.leases.Put(nodeKey(id), encodeLease(l)); err != nil {
		return err
	}
	t.held++
	if err := t.keyHolds(l.KeyID, 1); err != nil {
		return err
	}
	return t.expiry.Put(timeNodeKey(l.ExpiresAt, id), nil)
}

// extend raises a lease's expiry to at least exp and the node's watermark with it;
// renewed also stamps RenewedAt.
func (t *txn) extend(id uint32, exp int64, renewed bool) error {
	l, err := t.lease(id)
	if err != nil {
		return err
	}
	if exp > l.ExpiresAt {
		if err := t.expiry.Delete(timeNodeKey(l.ExpiresAt, id)); err != nil {
			return err
		}
		if err := t.expiry.Put(timeNodeKey(exp, id), nil); err != nil {
			return err
		}
	}
	l = leasetx.Extended(l, exp, t.now, renewed)
	if err := t.leases.Put(nodeKey(id), encodeLease(l)); err != nil {
		return err
	}
	return t.modify(id, func(r *nodeRec) { r.watermark = max(r.watermark, l.ExpiresAt) })
}

// heldBy returns the node IDs the requester with key holds, sorted.
func (t *txn) heldBy(key string) ([]uint32, error) {
	v := t.reqs.Get([]byte(key))
	if v == nil {
		return nil, nil
	}
	return decodeIDs(v)
}

func (t *txn) grant(ids []uint32) (idkeeper.Grant, error) {
	g := idkeeper.Grant{Leases: make([]idkeeper.Lease, 0, len(ids)), Now: msTime(t.now), Fence: t.fence}
	for _, id := range ids {
		rec, err := t.lease(id)
		if err != nil {
			return idkeeper.Grant{}, err
		}
		l, err := rec.On(id)
		if err != nil {
			return idkeeper.Grant{}, err
		}
		g.Leases = append(g.Leases, l)
	}
	return g, nil
}

// Renew implements idkeeper.LeaseStore.
func (s *Store) Renew(ctx context.Context, g idkeeper.Guard, p idkeeper.RenewParams) (idkeeper.Grant, error) {
	if err := p.Validate(); err != nil {
		return idkeeper.Grant{}, err
	}
	var gr idkeeper.Grant
	err := s.update(ctx, &g, func(t *txn) error {
		key := p.Requester.Key()
		if _, err := t.owned(key, p.KeyID); err != nil {
			return err
		}
		restored, contested, err := leasetx.Claims(rules{t}, key, p)
		if err != nil {
			return err
		}
		ids, err := t.heldBy(key)
		if err != nil {
			return err
		}
		for _, id := range ids {
			if err := t.extend(id, t.now+p.Duration.Milliseconds(), true); err != nil {
				return err
			}
		}
		if gr, err = t.grant(ids); err != nil {
			return err
		}
		gr.Restored, gr.Contested = restored, contested
		return t.histExtendAll(gr.Leases)
	})
	return gr, err
}

// Remove implements idkeeper.LeaseStore.
func (s *Store) Remove(ctx context.Context, g idkeeper.Guard, p idkeeper.RemoveParams) (int, error) {
	if err := p.Validate(); err != nil {
		return 0, err
	}
	var n int
	err := s.update(ctx, &g, func(t *txn) error {
		key := p.Requester.Key()
		ids, err := t.owned(key, p.KeyID)
		if err != nil || len(ids) == 0 {
			return err
		}
		if err := t.reqs.Delete([]byte(key)); err != nil {
			return err
		}
		for _, id := range ids {
			l, err := t.lease(id)
			if err != nil {
				return err
			}
			rec, err := t.node(id)
			if err != nil {
				return err
			}
			if rec.watermark, err = leasetx.Removed(t.histLog(), id, rec.tx(), l, p.MintedUpTo); err != nil {
				return err
			}
			if err := t.release(id, &rec, l); err != nil {
				return err
			}
			if err := t.charge(p.KeyID, id, rec); err != nil {
				return err
			}
		}
		n = len(ids)
		return t.pruneCharges(p.KeyID)
	})
	return n, err
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

// dropHeld takes one node out of a requester's index entry.
func (t *txn) dropHeld(key string, id uint32) error {
	ids, err := t.heldBy(key)
	if err != nil {
		return err
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
