package bolt

import (
	"context"
	"math"
	"slices"
	"time"

	bbolt "go.etcd.io/bbolt"

	"github.com/idkeeper/idkeeper"
)

// Init implements idkeeper.LeaseStore.
func (s *Store) Init(ctx context.Context, nodes int) (idkeeper.InitResult, error) {
	if err := checkPool(nodes); err != nil {
		return idkeeper.InitResult{}, err
	}
	var res idkeeper.InitResult
	err := s.update(ctx, false, func(t *txn) error {
		if uint64(nodes) < t.nodeCount {
			return idkeeper.Invalidf("nodes", "the store holds %d node IDs; a pool of %d would drop some", t.nodeCount, nodes)
		}
		if err := t.grow(nodes); err != nil {
			return err
		}
		if v := t.meta.Get(keySentinel); v != nil {
			res.Sentinel = string(v)
		} else {
			res = idkeeper.InitResult{Sentinel: newSentinel(), Fresh: true}
			if err := t.meta.Put(keySentinel, []byte(res.Sentinel)); err != nil {
				return err
			}
		}
		t.adopt(s, res.Sentinel)
		return nil
	})
	if err != nil {
		return idkeeper.InitResult{}, err
	}
	if res.Fresh {
		s.log.Info("bolt: created a new node pool", "nodes", nodes)
	}
	return res, nil
}

func checkPool(nodes int) error {
	if nodes < 1 || nodes > math.MaxUint32 {
		return idkeeper.Invalidf("nodes", "a pool holds 1..%d node IDs, not %d", uint32(math.MaxUint32), nodes)
	}
	return nil
}

// Reset implements idkeeper.LeaseStore. It never shrinks the pool: a p.Nodes below
// the stored size leaves the size as it is.
func (s *Store) Reset(ctx context.Context, old string, p idkeeper.ResetParams) (string, bool, error) {
	if err := checkPool(p.Nodes); err != nil {
		return "", false, err
	}
	var (
		sentinel  string
		recovered bool
	)
	until := timeMs(p.Until)
	err := s.update(ctx, false, func(t *txn) error {
		t.fence = max(t.fence, p.MinFence)
		if v := t.meta.Get(keySentinel); v != nil && string(v) != old {
			sentinel = string(v)
			t.adopt(s, sentinel)
			return nil
		}
		if err := t.grow(p.Nodes); err != nil {
			return err
		}
		for id := range uint32(t.nodeCount) {
			err := t.modify(id, func(r *nodeRec) {
				r.quarUntil = max(r.quarUntil, until)
				r.watermark = max(r.watermark, until)
			})
			if err != nil {
				return err
			}
		}
		sentinel, recovered = newSentinel(), true
		if err := t.meta.Put(keySentinel, []byte(sentinel)); err != nil {
			return err
		}
		t.adopt(s, sentinel)
		return nil
	})
	if err != nil {
		return "", false, err
	}
	if recovered {
		s.log.Warn("bolt: the store lost writes; every node ID is quarantined and its watermark raised",
			"until", p.Until, "minFence", p.MinFence)
	}
	return sentinel, recovered, nil
}

// Alloc implements idkeeper.LeaseStore.
func (s *Store) Alloc(ctx context.Context, r idkeeper.Requester, count int, first time.Duration) (idkeeper.Grant, error) {
	if err := r.Validate(); err != nil {
		return idkeeper.Grant{}, err
	}
	if count < 1 {
		return idkeeper.Grant{}, idkeeper.Invalidf("count", "count must be at least 1, got %d", count)
	}
	var g idkeeper.Grant
	err := s.update(ctx, true, func(t *txn) error {
		if err := t.promote(); err != nil {
			return err
		}
		key := r.Key()
		exp := t.now + first.Milliseconds()
		held, err := t.heldBy(key)
		if err != nil {
			return err
		}
		if len(held) > 0 {
			if len(held) != count {
				return &idkeeper.Error{
					Code:    idkeeper.CodeRequesterCountMismatch,
					Message: "the requester holds a different number of node IDs; remove them first",
					Details: map[string]any{"held": len(held), "requested": count},
				}
			}
			for _, id := range held {
				if err := t.extend(id, exp, false); err != nil {
					return err
				}
			}
			g, err = t.grant(held)
			return err
		}
		if free := int(t.nodeCount - t.held - t.quarantineSize); free < count {
			return &idkeeper.Error{
				Code:    idkeeper.CodeNodeIDsExhausted,
				Message: "not enough free node IDs",
				Details: map[string]any{"requested": count, "remaining": free},
			}
		}
		ids, err := t.pick(count)
		if err != nil {
			return err
		}
		for _, id := range ids {
			if err := t.take(id, key, exp); err != nil {
				return err
			}
		}
		slices.Sort(ids)
		if err := t.reqs.Put([]byte(key), encodeIDs(ids)); err != nil {
			return err
		}
		g, err = t.grant(ids)
		return err
	})
	return g, err
}

// take grants a free node to the requester with key, until exp.
func (t *txn) take(id uint32, key string, exp int64) error {
	r, err := t.node(id)
	if err != nil {
		return err
	}
	if err := t.unplace(id, &r); err != nil {
		return err
	}
	t.fence++
	l := leaseRec{notBefore: r.watermark + 1, expiresAt: exp, grantedAt: t.now, renewedAt: zeroMs, token: t.fence, requester: key}
	r.watermark = max(r.watermark, exp)
	if err := t.putNode(id, r); err != nil {
		return err
	}
	if err := t.leases.Put(nodeKey(id), l.encode()); err != nil {
		return err
	}
	t.held++
	return t.expiry.Put(timeNodeKey(exp, id), nil)
}

// extend raises a lease's expiry to at least exp and the node's watermark with it;
// renewed also stamps RenewedAt.
func (t *txn) extend(id uint32, exp int64, renewed bool) error {
	l, err := t.lease(id)
	if err != nil {
		return err
	}
	if exp > l.expiresAt {
		if err := t.expiry.Delete(timeNodeKey(l.expiresAt, id)); err != nil {
			return err
		}
		if err := t.expiry.Put(timeNodeKey(exp, id), nil); err != nil {
			return err
		}
		l.expiresAt = exp
	}
	if renewed {
		l.renewedAt = t.now
	}
	if err := t.leases.Put(nodeKey(id), l.encode()); err != nil {
		return err
	}
	return t.modify(id, func(r *nodeRec) { r.watermark = max(r.watermark, l.expiresAt) })
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
		l, err := rec.lease(id)
		if err != nil {
			return idkeeper.Grant{}, err
		}
		g.Leases = append(g.Leases, l)
	}
	return g, nil
}

// Renew implements idkeeper.LeaseStore.
func (s *Store) Renew(ctx context.Context, r idkeeper.Requester, d time.Duration) (idkeeper.Grant, error) {
	if err := r.Validate(); err != nil {
		return idkeeper.Grant{}, err
	}
	var g idkeeper.Grant
	err := s.update(ctx, true, func(t *txn) error {
		ids, err := t.heldBy(r.Key())
		if err != nil {
			return err
		}
		for _, id := range ids {
			if err := t.extend(id, t.now+d.Milliseconds(), true); err != nil {
				return err
			}
		}
		g, err = t.grant(ids)
		return err
	})
	return g, err
}

// Remove implements idkeeper.LeaseStore.
func (s *Store) Remove(ctx context.Context, r idkeeper.Requester, mintedUpTo time.Time) (int, error) {
	if err := r.Validate(); err != nil {
		return 0, err
	}
	var n int
	err := s.update(ctx, true, func(t *txn) error {
		key := r.Key()
		ids, err := t.heldBy(key)
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
			if !mintedUpTo.IsZero() {
				wm := max(min(timeMs(mintedUpTo), l.expiresAt), l.notBefore-1)
				if rec.quarUntil > t.now {
					wm = max(wm, rec.quarUntil)
				}
				rec.watermark = wm
			}
			if err := t.release(id, &rec, l); err != nil {
				return err
			}
		}
		n = len(ids)
		return nil
	})
	return n, err
}

// release deletes a held node's lease and puts the node at the back of the free
// order. The caller updates the requester index.
func (t *txn) release(id uint32, r *nodeRec, l leaseRec) error {
	if err := t.leases.Delete(nodeKey(id)); err != nil {
		return err
	}
	if err := t.expiry.Delete(timeNodeKey(l.expiresAt, id)); err != nil {
		return err
	}
	t.held--
	t.seq++
	r.freeSeq = t.seq
	return t.place(id, r)
}

// Reclaim implements idkeeper.LeaseStore.
func (s *Store) Reclaim(ctx context.Context, grace time.Duration) (int, error) {
	var n int
	err := s.update(ctx, true, func(t *txn) error {
		if err := t.promote(); err != nil {
			return err
		}
		cutoff := t.now - grace.Milliseconds()
		for _, k := range collect(t.expiry, func(k []byte) bool { return keyTime(k) < cutoff }, -1) {
			id := keyNode(k)
			l, err := t.lease(id)
			if err != nil {
				return err
			}
			rec, err := t.node(id)
			if err != nil {
				return err
			}
			if err := t.release(id, &rec, l); err != nil {
				return err
			}
			if err := t.dropHeld(l.requester, id); err != nil {
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
func (s *Store) Quarantine(ctx context.Context, until time.Time, nodes ...idkeeper.NodeID) error {
	ms := timeMs(until)
	return s.update(ctx, true, func(t *txn) error {
		for _, id := range nodes {
			if id < 0 || uint64(id) >= t.nodeCount {
				return idkeeper.Invalidf("nodes", "node ID %d is outside the pool of %d", id, t.nodeCount)
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

// Counts implements idkeeper.LeaseStore. It costs O(log n + k), k being the
// expired leases not yet reclaimed plus the ended quarantines not yet promoted.
func (s *Store) Counts(ctx context.Context) (idkeeper.Counts, error) {
	var c idkeeper.Counts
	err := s.view(ctx, func(t *txn) error {
		inGrace := countWhile(t.expiry, func(k []byte) bool { return keyTime(k) < t.now })
		ended := countWhile(t.quar, func(k []byte) bool { return keyTime(k) <= t.now })
		quarantined := int(t.quarantineSize) - ended
		c = idkeeper.Counts{
			Total:       int(t.nodeCount),
			Remaining:   int(t.nodeCount) - int(t.held) - quarantined,
			Leased:      int(t.held) - inGrace,
			InGrace:     inGrace,
			Quarantined: quarantined,
		}
		return nil
	})
	return c, err
}

func countWhile(b *bbolt.Bucket, ok func(k []byte) bool) int {
	n := 0
	c := b.Cursor()
	for k, _ := c.First(); k != nil && ok(k); k, _ = c.Next() {
		n++
	}
	return n
}

// Leases implements idkeeper.LeaseStore.
func (s *Store) Leases(ctx context.Context) ([]idkeeper.Lease, error) {
	var out []idkeeper.Lease
	err := s.view(ctx, func(t *txn) error {
		out = make([]idkeeper.Lease, 0, t.held)
		return t.leases.ForEach(func(k, v []byte) error {
			rec, err := decodeLease(v)
			if err != nil {
				return err
			}
			l, err := rec.lease(keyNode(k))
			out = append(out, l)
			return err
		})
	})
	return out, err
}

// Node implements idkeeper.LeaseStore.
func (s *Store) Node(ctx context.Context, id idkeeper.NodeID) (idkeeper.NodeState, error) {
	var st idkeeper.NodeState
	err := s.view(ctx, func(t *txn) error {
		if id < 0 || uint64(id) >= t.nodeCount {
			return idkeeper.ErrNotFound
		}
		r, err := t.node(uint32(id))
		if err != nil {
			return err
		}
		st = idkeeper.NodeState{NodeID: id, Watermark: msTime(r.watermark), QuarantinedUntil: msTime(r.quarUntil)}
		if r.place != placeHeld {
			return nil
		}
		rec, err := t.lease(uint32(id))
		if err != nil {
			return err
		}
		l, err := rec.lease(uint32(id))
		st.Lease = &l
		return err
	})
	if err != nil {
		return idkeeper.NodeState{}, err
	}
	return st, nil
}
