package postgres

import (
	"context"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/internal/leasetx"
)

var _ idkeeper.Store = (*Store)(nil)
var _ idkeeper.IdentifiedStore = (*Store)(nil)

// Status implements idkeeper.LeaseStore.
func (s *Store) Status(ctx context.Context) (idkeeper.StoreStatus, error) {
	var st idkeeper.StoreStatus
	err := s.view(ctx, "status", func(t *txn) error {
		g, ok := t.generation()
		pool, err := t.pool()
		st = idkeeper.StoreStatus{Initialised: ok, Generation: g, Fence: t.m.fence, Pool: pool, Now: msTime(t.now)}
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
	err := s.update(ctx, "init", nil, func(t *txn) error {
		res = idkeeper.InitResult{}
		if g, ok := t.generation(); ok {
			res.Generation = g
			return t.growTo(pool)
		}
		res = idkeeper.InitResult{Fresh: true, Generation: leasetx.Fresh(t.now)}
		if err := t.growTo(pool); err != nil {
			return err
		}
		t.setGeneration(res.Generation)
		return nil
	})
	if err != nil {
		return idkeeper.InitResult{}, err
	}
	if res.Fresh {
		s.log.Info("postgres: initialised a new node pool", "pool", pool.String(), "generation", res.Generation.ID)
	}
	return res, nil
}

// Grow implements idkeeper.LeaseStore.
func (s *Store) Grow(ctx context.Context, g idkeeper.Guard, pool idkeeper.PoolSpec) error {
	if err := pool.Validate(); err != nil {
		return err
	}
	return s.update(ctx, "grow", &g, func(t *txn) error { return t.growTo(pool) })
}

// Reset implements idkeeper.LeaseStore: one statement raises every node's floor
// and quarantine and places the free ones anew. It never shrinks the pool.
func (s *Store) Reset(ctx context.Context, p idkeeper.ResetParams) (idkeeper.ResetResult, error) {
	if err := p.Validate(); err != nil {
		return idkeeper.ResetResult{}, err
	}
	var res idkeeper.ResetResult
	until := timeMs(p.Until)
	err := s.update(ctx, "reset", nil, func(t *txn) error {
		if err := t.adopt(p.Pool, true); err != nil {
			return err
		}
		t.m.fence = max(t.m.fence, p.MinFence)
		if err := t.grow(p.Pool.Nodes); err != nil {
			return err
		}
		_, err := t.tx.Exec(ctx, `UPDATE `+s.t.nodes+` SET quar_until = greatest(quar_until, $1),
			floor = greatest(floor, $1), restorable = true,
			place = CASE WHEN place = 0 THEN 0 WHEN greatest(quar_until, $1) > $2 THEN 3
				WHEN greatest(watermark, floor, $1) < $2 THEN 1 ELSE 2 END`, until, t.now)
		if err != nil {
			return err
		}
		if err := t.recountQuarantined(); err != nil {
			return err
		}
		cur, ok := t.generation()
		res = leasetx.ResetGeneration(cur, ok, p.Seen, t.now)
		t.setGeneration(res.Generation)
		return nil
	})
	if err != nil {
		return idkeeper.ResetResult{}, err
	}
	s.log.Warn("postgres: the store lost writes; every node ID is quarantined and its watermark floor raised",
		"until", p.Until, "minFence", p.MinFence, "generation", res.Generation.Number)
	return res, nil
}

// recountQuarantined sets the quarantine counter from the quarantine index,
// after a statement that placed many nodes at once.
func (t *txn) recountQuarantined() error {
	clear(t.nodes)
	return t.tx.QueryRow(t.ctx, `SELECT count(*) FROM `+t.s.t.nodes+` WHERE place = 3`).Scan(&t.m.quarantined)
}

// ruled runs step, a step of the shared lease rules, in one lease step guarded
// by g (leasetx.Step), combined with the steps of concurrent callers
// (combined).
func ruled[T any](s *Store, ctx context.Context, op string, g *idkeeper.Guard, step func(leasetx.Tx) (T, error)) (T, error) {
	run := func(fn func(leasetx.Tx) error) error {
		return s.combined(ctx, op, g, func(t *txn) error { return fn(rules{t}) })
	}
	return leasetx.Step(run, step)
}

// Alloc implements idkeeper.LeaseStore (leasetx.Alloc).
func (s *Store) Alloc(ctx context.Context, g idkeeper.Guard, p idkeeper.AllocParams) (idkeeper.Grant, error) {
	if err := p.Validate(); err != nil {
		return idkeeper.Grant{}, err
	}
	return ruled(s, ctx, "alloc", &g, func(t leasetx.Tx) (idkeeper.Grant, error) { return leasetx.Alloc(t, p) })
}

// Renew implements idkeeper.LeaseStore (leasetx.Renew).
func (s *Store) Renew(ctx context.Context, g idkeeper.Guard, p idkeeper.RenewParams) (idkeeper.Grant, error) {
	if err := p.Validate(); err != nil {
		return idkeeper.Grant{}, err
	}
	return ruled(s, ctx, "renew", &g, func(t leasetx.Tx) (idkeeper.Grant, error) { return leasetx.Renew(t, p) })
}

// Remove implements idkeeper.LeaseStore (leasetx.Remove).
func (s *Store) Remove(ctx context.Context, g idkeeper.Guard, p idkeeper.RemoveParams) (int, error) {
	if err := p.Validate(); err != nil {
		return 0, err
	}
	return ruled(s, ctx, "remove", &g, func(t leasetx.Tx) (int, error) { return leasetx.Remove(t, p) })
}

// RevokeLease implements idkeeper.LeaseStore (leasetx.Revoke).
func (s *Store) RevokeLease(ctx context.Context, g idkeeper.Guard, node idkeeper.NodeID, token uint64, grace time.Duration) (idkeeper.Lease, error) {
	if err := idkeeper.CheckGrace(grace); err != nil {
		return idkeeper.Lease{}, err
	}
	return ruled(s, ctx, "revoke", &g, func(t leasetx.Tx) (idkeeper.Lease, error) { return leasetx.Revoke(t, node, token, grace) })
}

// ReclaimBatch is how many leases one transaction of Reclaim ends: the meta
// row stays locked, and every grant waits, for one batch at a time (about
// 0.1 s for 512 on this project's test machine), not for a whole pool's.
const ReclaimBatch = 512

// Reclaim implements idkeeper.LeaseStore: the leases past their expiry + grace
// are read through the expiry index and ended in its order (leasetx.Reclaimed),
// in transactions of ReclaimBatch leases until none is due. It returns how many
// it ended, those of the committed batches on an error too.
func (s *Store) Reclaim(ctx context.Context, g idkeeper.Guard, grace time.Duration) (int, error) {
	total := 0
	for {
		n := 0
		err := s.update(ctx, "reclaim", &g, func(t *txn) error {
			n = 0
			if err := t.promote(); err != nil {
				return err
			}
			var ids []uint32
			err := t.query(`SELECT `+nodeCols+` FROM `+s.t.nodes+` WHERE place = 0 AND expires_at < $1
				ORDER BY expires_at, id LIMIT $2`, &ids, t.now-grace.Milliseconds(), ReclaimBatch)
			if err != nil {
				return err
			}
			for _, id := range ids {
				if err := leasetx.Reclaimed(rules{t}, id); err != nil {
					return err
				}
			}
			n = len(ids)
			return nil
		})
		total += n
		if err != nil || n < ReclaimBatch {
			return total, err
		}
	}
}

// Quarantine implements idkeeper.LeaseStore.
func (s *Store) Quarantine(ctx context.Context, g idkeeper.Guard, until time.Time, nodes ...idkeeper.NodeID) error {
	ms := timeMs(until)
	return s.update(ctx, "quarantine", &g, func(t *txn) error {
		ids := make([]int64, len(nodes))
		for i, id := range nodes {
			if !t.inPool(id) {
				return idkeeper.OutsidePool(id)
			}
			ids[i] = int64(id)
		}
		if len(ids) == 0 {
			return nil
		}
		_, err := t.tx.Exec(ctx, `UPDATE `+s.t.nodes+` SET quar_until = greatest(quar_until, $1),
			place = CASE WHEN place = 0 THEN 0 WHEN greatest(quar_until, $1) > $2 THEN 3
				WHEN greatest(watermark, floor) < $2 THEN 1 ELSE 2 END WHERE id = ANY($3)`, ms, t.now, ids)
		if err != nil {
			return err
		}
		return t.recountQuarantined()
	})
}
