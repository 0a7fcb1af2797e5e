package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/internal/histrec"
)

// Counts implements idkeeper.LeaseStore, in one statement over the partial
// indexes: the leases in grace, the quarantines ended and the cooling
// watermarks passed since the last promotion, judged at now.
func (s *Store) Counts(ctx context.Context) (idkeeper.Counts, error) {
	var c idkeeper.Counts
	err := s.view(ctx, "counts", func(t *txn) error {
		nt := s.t.nodes
		var inGrace, ended, cooling int
		var next *int64
		err := t.tx.QueryRow(ctx, `WITH c AS (
				SELECT greatest(watermark, floor) AS w FROM `+nt+` WHERE place = 2 AND greatest(watermark, floor) >= $1
				UNION ALL SELECT greatest(watermark, floor) FROM `+nt+`
					WHERE place = 3 AND quar_until <= $1 AND greatest(watermark, floor) >= $1)
			SELECT (SELECT count(*) FROM `+nt+` WHERE place = 0 AND expires_at < $1),
				(SELECT count(*) FROM `+nt+` WHERE place = 3 AND quar_until <= $1),
				(SELECT count(*) FROM c), (SELECT min(w) FROM c)`, t.now).Scan(&inGrace, &ended, &cooling, &next)
		if err != nil {
			return err
		}
		quarantined := int(t.m.quarantined) - ended
		c = idkeeper.Counts{Total: int(t.m.nodes), Remaining: int(t.m.nodes) - int(t.m.held) - quarantined,
			Cooling: cooling, Leased: int(t.m.held) - inGrace, InGrace: inGrace, Quarantined: quarantined}
		if cooling > 0 && next != nil {
			c.NextReadyAt = msTime(*next + 1)
		}
		return nil
	})
	return c, err
}

// Leases implements idkeeper.LeaseStore.
func (s *Store) Leases(ctx context.Context) ([]idkeeper.Lease, error) {
	var out []idkeeper.Lease
	err := s.view(ctx, "leases", func(t *txn) error {
		var ids []uint32
		if err := t.query(`SELECT `+nodeCols+` FROM `+s.t.nodes+` WHERE place = 0 ORDER BY id`, &ids); err != nil {
			return err
		}
		out = make([]idkeeper.Lease, 0, len(ids))
		for _, id := range ids {
			l, err := t.nodes[id].lease.On(id)
			if err != nil {
				return err
			}
			out = append(out, l)
		}
		return nil
	})
	return out, err
}

// Node implements idkeeper.LeaseStore.
func (s *Store) Node(ctx context.Context, id idkeeper.NodeID) (idkeeper.NodeState, error) {
	var st idkeeper.NodeState
	err := s.view(ctx, "node", func(t *txn) error {
		if !t.inPool(id) {
			return idkeeper.ErrNotFound
		}
		n, err := t.node(uint32(id))
		if err != nil {
			return err
		}
		st = n.state(uint32(id))
		if n.lease != nil {
			l, err := n.lease.On(uint32(id))
			if err != nil {
				return err
			}
			st.Lease = &l
		}
		return nil
	})
	if err != nil {
		return idkeeper.NodeState{}, err
	}
	return st, nil
}

// state is the row as idkeeper.NodeState, without its lease.
func (n node) state(id uint32) idkeeper.NodeState {
	return idkeeper.NodeState{NodeID: idkeeper.NodeID(id), Watermark: msTime(n.watermark), Floor: msTime(n.floor),
		QuarantinedUntil: msTime(n.quarUntil), LastToken: n.lastToken, Restorable: n.restorable}
}

// KeyHoldings implements idkeeper.LeaseStore.
func (s *Store) KeyHoldings(ctx context.Context) (map[string]int, error) {
	return s.keyCounts(ctx, "key holdings", false, `SELECT key_id, count(*) FROM `+s.t.nodes+` WHERE place = 0 GROUP BY key_id`)
}

// KeyCooling implements idkeeper.LeaseStore: the charges that count at now
// (leasetx.Live), joined with their nodes.
func (s *Store) KeyCooling(ctx context.Context) (map[string]int, error) {
	return s.keyCounts(ctx, "key cooling", true, `SELECT c.key_id, count(*) FROM `+s.t.charges+` c JOIN `+s.t.nodes+
		` n ON n.id = c.node WHERE c.until >= $1 AND n.place <> 0 AND n.last_token = c.token GROUP BY c.key_id`)
}

// keyCounts runs sql, which reads now as $1 when withNow, and collects its (key,
// count) rows.
func (s *Store) keyCounts(ctx context.Context, op string, withNow bool, sql string) (map[string]int, error) {
	out := map[string]int{}
	err := s.view(ctx, op, func(t *txn) error {
		args := []any{}
		if withNow {
			args = append(args, t.now)
		}
		rows, err := t.tx.Query(ctx, sql, args...)
		if err != nil {
			return err
		}
		var k string
		var n int
		_, err = pgx.ForEachRow(rows, []any{&k, &n}, func() error { out[k] = n; return nil })
		return err
	})
	return out, err
}

// LeaseAt implements idkeeper.HistoryStore.
func (s *Store) LeaseAt(ctx context.Context, node idkeeper.NodeID, at time.Time) ([]idkeeper.HistoryRecord, error) {
	out := []idkeeper.HistoryRecord{}
	if node < 0 || int64(node) > int64(^uint32(0)) {
		return out, nil
	}
	err := s.history(ctx, "lease at", func(h idkeeper.HistoryRecord) {
		if h.Holds(at) {
			out = append(out, h)
		}
	}, `SELECT node, token, rec FROM `+s.t.history+` WHERE node = $1 ORDER BY token`, int64(node))
	return out, err
}

// NodeHistory implements idkeeper.HistoryStore.
func (s *Store) NodeHistory(ctx context.Context, node idkeeper.NodeID, before uint64, limit int) ([]idkeeper.HistoryRecord, error) {
	if ok, err := histrec.CheckPage(node, limit); err != nil || !ok {
		return nil, err
	}
	var out []idkeeper.HistoryRecord
	err := s.history(ctx, "node history", func(h idkeeper.HistoryRecord) { out = append(out, h) },
		`SELECT node, token, rec FROM `+s.t.history+` WHERE node = $1 AND ($2 = 0 OR token < $2)
			ORDER BY token DESC LIMIT $3`, int64(node), int64(before), limit)
	return out, err
}

// history reads the history records sql selects (node, token, rec), in its order.
func (s *Store) history(ctx context.Context, op string, fn func(idkeeper.HistoryRecord), sql string, args ...any) error {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	rows, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return s.wrap(op, err)
	}
	var node, token int64
	var v []byte
	_, err = pgx.ForEachRow(rows, []any{&node, &token, &v}, func() error {
		r, err := decodeRec(uint32(node), uint64(token), v)
		if err != nil {
			return err
		}
		fn(r.Record(uint32(node), uint64(token)))
		return nil
	})
	return s.wrap(op, err)
}

// PruneHistory implements idkeeper.HistoryStore: one statement through the
// index of ended records, in a lease step (no step edits a record meanwhile).
func (s *Store) PruneHistory(ctx context.Context, before time.Time, limit int) (int, error) {
	if err := idkeeper.CheckHistoryLimit(limit, idkeeper.MaxHistoryPrune); err != nil {
		return 0, err
	}
	n := 0
	err := s.update(ctx, "prune history", nil, func(t *txn) error {
		tag, err := t.tx.Exec(ctx, `DELETE FROM `+s.t.history+` WHERE (node, token) IN (SELECT node, token FROM `+
			s.t.history+` WHERE ended_at < $1 ORDER BY ended_at, node, token LIMIT $2)`, timeMs(before), limit)
		n = int(tag.RowsAffected())
		return err
	})
	return n, err
}

// HistoryCount implements idkeeper.HistoryStore.
func (s *Store) HistoryCount(ctx context.Context) (int, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var n int
	err := s.pool.QueryRow(ctx, `SELECT count(*) FROM `+s.t.history).Scan(&n)
	return n, s.wrap("history count", err)
}
