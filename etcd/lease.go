package etcd

import (
	"cmp"
	"context"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/internal/leasetx"
)

// Status implements idkeeper.LeaseStore: one read of the meta record.
func (s *Store) Status(ctx context.Context) (idkeeper.StoreStatus, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	m, _, err := s.readMeta(ctx)
	if err != nil {
		return idkeeper.StoreStatus{}, wrap("status", err)
	}
	pool, err := m.pool()
	if err != nil {
		return idkeeper.StoreStatus{}, err
	}
	return idkeeper.StoreStatus{Initialised: m.Generation != nil, Generation: m.Generation.generation(), Fence: m.Fence,
		Pool: pool, Now: msTime(s.nowMs())}, nil
}

// readMeta reads the meta record and its revision (0 when absent).
func (s *Store) readMeta(ctx context.Context) (meta, int64, error) {
	resp, err := s.c.Get(ctx, s.k.meta)
	if err != nil {
		return meta{}, 0, err
	}
	if len(resp.Kvs) == 0 {
		return meta{Version: schemaVersion}, 0, nil
	}
	m, err := decodeMeta(resp.Kvs[0].Value)
	return m, resp.Kvs[0].ModRevision, err
}

// Init implements idkeeper.LeaseStore.
func (s *Store) Init(ctx context.Context, pool idkeeper.PoolSpec) (idkeeper.InitResult, error) {
	if err := pool.Validate(); err != nil {
		return idkeeper.InitResult{}, err
	}
	var res idkeeper.InitResult
	err := s.update(ctx, "init", nil, nil, func(t *txn) error {
		if g := t.meta.Generation; g != nil {
			res = idkeeper.InitResult{Generation: g.generation()}
			return t.growTo(pool)
		}
		res = idkeeper.InitResult{Fresh: true, Generation: leasetx.Fresh(t.now)}
		if err := t.growTo(pool); err != nil {
			return err
		}
		t.meta.Generation = genRecOf(res.Generation)
		return nil
	})
	if err != nil {
		return idkeeper.InitResult{}, err
	}
	if res.Fresh {
		s.log.Info("etcd: initialised a new node pool", "pool", pool.String(), "generation", res.Generation.ID, "prefix", s.k.prefix)
	}
	return res, nil
}

// Grow implements idkeeper.LeaseStore.
func (s *Store) Grow(ctx context.Context, g idkeeper.Guard, pool idkeeper.PoolSpec) error {
	if err := pool.Validate(); err != nil {
		return err
	}
	return s.update(ctx, "grow", &g, nil, func(t *txn) error { return t.growTo(pool) })
}

// Reset implements idkeeper.LeaseStore: one transaction that rewrites every node
// record (read in one range at the meta revision). It never shrinks the pool: a
// p.Pool.Nodes below the stored size leaves the size as it is.
func (s *Store) Reset(ctx context.Context, p idkeeper.ResetParams) (idkeeper.ResetResult, error) {
	if err := p.Validate(); err != nil {
		return idkeeper.ResetResult{}, err
	}
	var res idkeeper.ResetResult
	until := timeMs(p.Until)
	raise := func(r *nodeRec) {
		r.quarUntil, r.floor, r.restorable = max(r.quarUntil, until), max(r.floor, until), true
	}
	first := func(t *txn) []clientv3.Op { return []clientv3.Op{clientv3.OpGet(s.k.node, clientv3.WithPrefix())} }
	err := s.update(ctx, "reset", nil, first, func(t *txn) error {
		if err := t.adopt(p.Pool, true); err != nil {
			return err
		}
		t.meta.Fence = max(t.meta.Fence, p.MinFence)
		from, old := t.meta.First, t.meta.end()
		t.grow(p.Pool.Nodes, raise)
		for i := from; i < old; i++ { // uint64: a pool may end at node 2^32−1
			if err := t.modify(uint32(i), raise); err != nil {
				return err
			}
		}
		cur := t.meta.Generation.generation()
		res = leasetx.ResetGeneration(cur, !cur.IsZero(), p.Seen, t.now)
		t.meta.Generation = genRecOf(res.Generation)
		return nil
	})
	if err != nil {
		return idkeeper.ResetResult{}, err
	}
	s.log.Warn("etcd: the store lost writes; every node ID is quarantined and its watermark floor raised",
		"until", p.Until, "minFence", p.MinFence, "generation", res.Generation.Number, "prefix", s.k.prefix)
	return res, nil
}

// ruled runs step, a step of the shared lease rules, in one update named op,
// guarded by g (nil: none) and reading first's ops at its start (nil: none)
// (leasetx.Step).
func ruled[T any](s *Store, ctx context.Context, op string, g *idkeeper.Guard, first func(*txn) []clientv3.Op,
	step func(leasetx.Tx) (T, error)) (T, error) {
	return leasetx.Step(func(fn func(leasetx.Tx) error) error {
		return s.update(ctx, op, g, first, func(t *txn) error { return fn(rules{t}) })
	}, step)
}

// rangeOp reads the first limit entries of index from from on, with the records
// they hold.
func rangeOp(from, index string, limit int) clientv3.Op {
	return clientv3.OpGet(from, clientv3.WithRange(clientv3.GetPrefixRangeEnd(index)), clientv3.WithLimit(int64(limit)))
}

// Alloc implements idkeeper.LeaseStore (leasetx.Alloc): two round trips for a
// new grant. The read takes, with the meta record, the requester's index entry,
// the key's count, the first Count entries of the ready and (live) cooling
// indexes and the entries time has moved on, each entry with its node's record;
// the commit writes. A repeat reads its node and history records in between.
func (s *Store) Alloc(ctx context.Context, g idkeeper.Guard, p idkeeper.AllocParams) (idkeeper.Grant, error) {
	if err := p.Validate(); err != nil {
		return idkeeper.Grant{}, err
	}
	key := p.Requester.Key()
	first := func(t *txn) []clientv3.Op {
		t.readyStart = s.readyFrom.Load()
		return append(t.staleOps(), clientv3.OpGet(s.k.req+key), clientv3.OpGet(s.k.keyHeld+p.KeyID), clientv3.OpGet(s.k.keyCool+p.KeyID),
			rangeOp(s.k.readyKey(t.readyStart, 0), s.k.ready, p.Count), rangeOp(before(s.k.cooling, t.now), s.k.cooling, p.Count))
	}
	return ruled(s, ctx, "alloc", &g, first, func(t leasetx.Tx) (idkeeper.Grant, error) { return leasetx.Alloc(t, p) })
}

// Renew implements idkeeper.LeaseStore (leasetx.Renew): three round trips (the
// requester's index entry, its node and history records, the commit), more with
// claims.
func (s *Store) Renew(ctx context.Context, g idkeeper.Guard, p idkeeper.RenewParams) (idkeeper.Grant, error) {
	if err := p.Validate(); err != nil {
		return idkeeper.Grant{}, err
	}
	key := p.Requester.Key()
	first := func(*txn) []clientv3.Op { return []clientv3.Op{clientv3.OpGet(s.k.req + key)} }
	return ruled(s, ctx, "renew", &g, first, func(t leasetx.Tx) (idkeeper.Grant, error) { return leasetx.Renew(t, p) })
}

// Remove implements idkeeper.LeaseStore (leasetx.Remove): three round trips, as Renew.
func (s *Store) Remove(ctx context.Context, g idkeeper.Guard, p idkeeper.RemoveParams) (int, error) {
	if err := p.Validate(); err != nil {
		return 0, err
	}
	key := p.Requester.Key()
	first := func(*txn) []clientv3.Op {
		return []clientv3.Op{clientv3.OpGet(s.k.req + key), clientv3.OpGet(s.k.keyCool + p.KeyID)}
	}
	return ruled(s, ctx, "remove", &g, first, func(t leasetx.Tx) (int, error) { return leasetx.Remove(t, p) })
}

// RevokeLease implements idkeeper.LeaseStore: one transaction that checks the
// guard, deletes the lease, raises the node's watermark and quarantine and frees
// it into the quarantine index (or ready or cooling, when ExpiresAt + grace has
// passed already).
func (s *Store) RevokeLease(ctx context.Context, g idkeeper.Guard, node idkeeper.NodeID, token uint64, grace time.Duration) (idkeeper.Lease, error) {
	if err := idkeeper.CheckGrace(grace); err != nil {
		return idkeeper.Lease{}, err
	}
	return ruled(s, ctx, "revoke lease", &g, nil, func(t leasetx.Tx) (idkeeper.Lease, error) {
		return leasetx.Revoke(t, node, token, grace)
	})
}

// Reclaim implements idkeeper.LeaseStore, in transactions of at most
// Options.ReclaimBatch leases, each guarded and each reading the expiry index
// again at its own now: a lease renewed meanwhile is no longer due.
func (s *Store) Reclaim(ctx context.Context, g idkeeper.Guard, grace time.Duration) (int, error) {
	total := 0
	for {
		n, full := 0, false
		first := func(t *txn) []clientv3.Op {
			cutoff := t.now - grace.Milliseconds()
			return append(t.staleOps(), clientv3.OpGet(s.k.expiry, clientv3.WithRange(before(s.k.expiry, cutoff)),
				clientv3.WithLimit(int64(s.reclaimBatch))))
		}
		err := s.update(ctx, "reclaim", &g, first, func(t *txn) error {
			n, full = 0, false
			if more, err := t.promote(); err != nil || more {
				return cmp.Or(err, errPartial)
			}
			if err := t.cacheEntries(2); err != nil {
				return err
			}
			due := t.scans[2]
			ids := make([]uint32, len(due))
			for i, k := range due {
				id, err := indexID(k)
				if err != nil {
					return err
				}
				ids[i] = id
			}
			if err := t.fetchNodes(ids); err != nil {
				return err
			}
			var more []string
			for _, id := range ids {
				r, err := t.node(id)
				if err != nil {
					return err
				}
				if r.lease == nil {
					return errNoLease(id)
				}
				more = append(more, s.k.req+r.lease.Requester, s.k.keyHeld+r.lease.KeyID, s.k.histKey(id, r.lease.Token))
			}
			if err := t.fetch(more...); err != nil {
				return err
			}
			for _, id := range ids {
				if err := leasetx.Reclaimed(rules{t}, id); err != nil {
					return err
				}
			}
			n, full = len(ids), len(ids) == s.reclaimBatch
			return nil
		})
		if err != nil {
			return total, err
		}
		total += n
		if !full {
			return total, nil
		}
	}
}

// Quarantine implements idkeeper.LeaseStore.
func (s *Store) Quarantine(ctx context.Context, g idkeeper.Guard, until time.Time, nodes ...idkeeper.NodeID) error {
	ms := timeMs(until)
	return s.update(ctx, "quarantine", &g, nil, func(t *txn) error {
		ids := make([]uint32, len(nodes))
		for i, id := range nodes {
			if !t.meta.inPool(id) {
				return idkeeper.OutsidePool(id)
			}
			ids[i] = uint32(id)
		}
		if err := t.fetchNodes(ids); err != nil {
			return err
		}
		for _, id := range ids {
			if err := t.modify(id, func(r *nodeRec) { r.quarUntil = max(r.quarUntil, ms) }); err != nil {
				return err
			}
		}
		return nil
	})
}
