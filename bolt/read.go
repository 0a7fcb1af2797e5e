package bolt

import (
	"context"
	"encoding/binary"

	bbolt "go.etcd.io/bbolt"

	"github.com/idkeeper/idkeeper"
)

// Counts implements idkeeper.LeaseStore. It costs O(log n + k), k being the
// expired leases not yet reclaimed plus the ended quarantines and passed cooling
// watermarks not yet promoted: the indexes are read as they are, and what time has
// moved on since the last Alloc or Reclaim is judged at now.
func (s *Store) Counts(ctx context.Context) (idkeeper.Counts, error) {
	var c idkeeper.Counts
	err := s.view(ctx, func(t *txn) error {
		inGrace := countWhile(t.expiry, func(k []byte) bool { return keyTime(k) < t.now })
		ended := collect(t.quar, func(k []byte) bool { return keyTime(k) <= t.now }, -1)
		quarantined := int(t.quarantineSize) - len(ended)
		// Cooling entries whose watermark has passed are ready at now.
		cooling := int(t.coolingSize) - countWhile(t.cooling, func(k []byte) bool { return keyTime(k) < t.now })
		next := int64(0)
		if k, _ := t.cooling.Cursor().Seek(binary.BigEndian.AppendUint64(nil, sortable(t.now))); k != nil {
			next = keyTime(k)
		}
		// A node whose quarantine has ended is ready or cooling, as its watermark says.
		for _, k := range ended {
			r, err := t.node(keyNode(k))
			if err != nil {
				return err
			}
			if w := r.fenced(); w >= t.now {
				if cooling == 0 || w < next {
					next = w
				}
				cooling++
			}
		}
		c = idkeeper.Counts{
			Total:       int(t.nodeCount),
			Remaining:   int(t.nodeCount) - int(t.held) - quarantined,
			Cooling:     cooling,
			Leased:      int(t.held) - inGrace,
			InGrace:     inGrace,
			Quarantined: quarantined,
		}
		if cooling > 0 {
			c.NextReadyAt = msTime(next + 1)
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
			l, err := rec.On(keyNode(k))
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
		if !t.inPool(id) {
			return idkeeper.ErrNotFound
		}
		r, err := t.node(uint32(id))
		if err != nil {
			return err
		}
		st = r.state(uint32(id))
		if r.place != placeHeld {
			return nil
		}
		rec, err := t.lease(uint32(id))
		if err != nil {
			return err
		}
		l, err := rec.On(uint32(id))
		st.Lease = &l
		return err
	})
	if err != nil {
		return idkeeper.NodeState{}, err
	}
	return st, nil
}

// KeyHoldings implements idkeeper.LeaseStore.
func (s *Store) KeyHoldings(ctx context.Context) (map[string]int, error) {
	out := map[string]int{}
	err := s.view(ctx, func(t *txn) error {
		return t.keyHeld.ForEach(func(k, v []byte) error {
			out[string(k[1:])] = int(getU64(v))
			return nil
		})
	})
	return out, err
}
