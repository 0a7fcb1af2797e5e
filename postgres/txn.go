package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/internal/leasetx"
)

// The lease pool, in four tables besides the meta row:
//
//	meta     generation (gen_id "" when none), fence, first, nodes, layout,
//	         free_seq (the free order's counter), held, quarantined
//	nodes    one row per node ID: place (leasetx.Place), free_seq, watermark,
//	         quar_until, floor, last_token, restorable, and while held (place 0)
//	         the lease: not_before, expires_at, granted_at, renewed_at, token,
//	         requester, key_id. Partial indexes are the free indexes (ready by
//	         free_seq, cooling by fenced watermark then free_seq, the quarantine
//	         by its end), the expiry index and the requester and key indexes of
//	         the leases.
//	charges  the cooling charges, key_id, ord (their order), node, until, token
//	history  node, token, rec (histrec.Rec's JSON), ended_at (NULL while open)
//
// The requester index entry (leasetx.Holding) and a key's count are the
// leases' own rows, read through their indexes: nothing to keep in step, and
// one write less per lease in every step.
//
// Every lease step locks the meta row first (SELECT … FOR UPDATE), so lease
// steps run one at a time, and reads at READ COMMITTED then see everything the
// steps before committed: the meta row is the serialisation point that the
// rules' isolation needs (leasetx.Tx), as etcd's meta key is.

// meta is the meta row.
type meta struct {
	genID, genOrigin  string
	genNumber         uint64
	genAt             int64
	fence             uint64
	first, nodes      uint64
	layout            string
	freeSeq           uint64
	held, quarantined int64
}

// node is one row of the nodes table.
type node struct {
	place      leasetx.Place
	freeSeq    uint64
	watermark  int64
	quarUntil  int64
	floor      int64
	lastToken  uint64
	restorable bool
	lease      *leasetx.Lease
}

func (n node) tx() leasetx.Node {
	return leasetx.Node{Watermark: n.watermark, QuarUntil: n.quarUntil, Floor: n.floor, LastToken: n.lastToken,
		Restorable: n.restorable, Held: n.place == leasetx.Held}
}

func (n node) fenced() int64 { return max(n.watermark, n.floor) }

// txn is one lease step's transaction: the meta row as locked, read and to be
// written, the node rows read so far (each as the transaction wrote it).
type txn struct {
	s     *Store
	ctx   context.Context
	tx    pgx.Tx
	now   int64
	m     meta
	m0    meta
	nodes map[uint32]node
	// promoted: promote ran at now in this transaction, so another finds
	// nothing to move (the steps of a combined transaction share now).
	promoted bool
}

const nodeCols = `id, place, free_seq, watermark, quar_until, floor, last_token, restorable, not_before, expires_at,
	granted_at, renewed_at, token, requester, key_id`

const metaCols = `gen_id, gen_number, gen_origin, gen_at, fence, first, nodes, layout, free_seq, held, quarantined`

func scanMeta(row pgx.Row, m *meta) error {
	return row.Scan(&m.genID, &m.genNumber, &m.genOrigin, &m.genAt, &m.fence, &m.first, &m.nodes, &m.layout,
		&m.freeSeq, &m.held, &m.quarantined)
}

// scanNode reads one row of nodeCols.
func scanNode(rows pgx.Rows) (uint32, node, error) {
	var (
		id                   int64
		n                    node
		place                int16
		nb, exp, gr, rn, tok *int64
		req, key             *string
	)
	err := rows.Scan(&id, &place, &n.freeSeq, &n.watermark, &n.quarUntil, &n.floor, &n.lastToken, &n.restorable,
		&nb, &exp, &gr, &rn, &tok, &req, &key)
	if err != nil {
		return 0, node{}, err
	}
	n.place = leasetx.Place(place)
	if n.place == leasetx.Held {
		if nb == nil || exp == nil || gr == nil || rn == nil || tok == nil || req == nil || key == nil {
			return 0, node{}, fmt.Errorf("node %d is held but its row holds no whole lease", id)
		}
		n.lease = &leasetx.Lease{NotBefore: *nb, ExpiresAt: *exp, GrantedAt: *gr, RenewedAt: *rn, Token: uint64(*tok),
			Requester: *req, KeyID: *key}
	}
	return uint32(id), n, nil
}

// begin locks and reads the meta row, then reads the clock (after the lock, so
// that the steps' instants follow their order), in one round trip, and checks g
// (nil: none).
func (s *Store) begin(ctx context.Context, tx pgx.Tx, g *idkeeper.Guard) (*txn, error) {
	t := &txn{s: s, ctx: ctx, tx: tx, nodes: map[uint32]node{}}
	b := &pgx.Batch{}
	b.Queue(`SELECT ` + metaCols + ` FROM ` + s.t.meta + ` FOR UPDATE`)
	if s.clock == nil {
		b.Queue(`SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint`)
	}
	res := tx.SendBatch(ctx, b)
	err := scanMeta(res.QueryRow(), &t.m)
	if err == nil && s.clock == nil {
		err = res.QueryRow().Scan(&t.now)
	}
	if cerr := res.Close(); err == nil {
		err = cerr
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("postgres: the schema %s holds no meta row (run idkeeper init)", s.schema)
	}
	if err != nil {
		return nil, err
	}
	if s.clock != nil {
		t.now = timeMs(s.clock())
	}
	t.m0 = t.m
	if g != nil {
		if err := g.Check(t.m.genID, t.m.fence, msTime(t.now)); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// update runs fn in one lease step: a transaction that locks the meta row,
// checks g (nil: none), runs fn and writes the meta row back when fn changed it.
func (s *Store) update(ctx context.Context, op string, g *idkeeper.Guard, fn func(*txn) error) error {
	return s.inTx(ctx, op, func(tx pgx.Tx) error {
		t, err := s.begin(ctx, tx, g)
		if err != nil {
			return err
		}
		if err := fn(t); err != nil {
			return err
		}
		return t.flush()
	})
}

// flush writes the meta row when the step changed it.
func (t *txn) flush() error {
	if t.m == t.m0 {
		return nil
	}
	m := t.m
	_, err := t.tx.Exec(t.ctx, `UPDATE `+t.s.t.meta+` SET gen_id = $1, gen_number = $2, gen_origin = $3, gen_at = $4,
		fence = $5, first = $6, nodes = $7, layout = $8, free_seq = $9, held = $10, quarantined = $11`,
		m.genID, m.genNumber, m.genOrigin, m.genAt, m.fence, m.first, m.nodes, m.layout, m.freeSeq, m.held, m.quarantined)
	return err
}

// view runs fn in one read-only transaction at REPEATABLE READ: every read
// of fn sees the same committed state. A read-only transaction is never aborted
// for a serialization failure.
func (s *Store) view(ctx context.Context, op string, fn func(*txn) error) error {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly},
		func(tx pgx.Tx) error {
			t := &txn{s: s, ctx: ctx, tx: tx, nodes: map[uint32]node{}}
			err := scanMeta(tx.QueryRow(ctx, `SELECT `+metaCols+` FROM `+s.t.meta), &t.m)
			if errors.Is(err, pgx.ErrNoRows) {
				return fmt.Errorf("postgres: the schema %s holds no meta row (run idkeeper init)", s.schema)
			}
			if err != nil {
				return err
			}
			if t.now, err = s.nowMs(ctx, tx); err != nil {
				return err
			}
			return fn(t)
		})
	return s.wrap(op, err)
}

// inPool reports whether id lies in the stored pool.
func (t *txn) inPool(id idkeeper.NodeID) bool {
	return id >= 0 && uint64(id) >= t.m.first && uint64(id) < t.m.first+t.m.nodes
}

// generation is the stored generation; ok false when there is none.
func (t *txn) generation() (idkeeper.Generation, bool) {
	if t.m.genID == "" {
		return idkeeper.Generation{}, false
	}
	return idkeeper.Generation{ID: t.m.genID, Number: t.m.genNumber, Origin: idkeeper.Origin(t.m.genOrigin),
		At: msTime(t.m.genAt)}, true
}

func (t *txn) setGeneration(g idkeeper.Generation) {
	t.m.genID, t.m.genNumber, t.m.genOrigin, t.m.genAt = g.ID, g.Number, string(g.Origin), timeMs(g.At)
}

// pool is the stored pool: zero when there is none.
func (t *txn) pool() (idkeeper.PoolSpec, error) {
	if t.m.nodes == 0 {
		return idkeeper.PoolSpec{}, nil
	}
	p := idkeeper.PoolSpec{First: idkeeper.NodeID(t.m.first), Nodes: int(t.m.nodes), Layout: idkeeper.DefaultLayout}
	if t.m.layout != "" {
		l, err := idkeeper.ParseLayout(t.m.layout)
		if err != nil {
			return idkeeper.PoolSpec{}, fmt.Errorf("postgres: the stored layout: %w", err)
		}
		p.Layout = l
	}
	return p, nil
}

// fetch reads the rows of ids that the transaction has not read yet.
func (t *txn) fetch(ids []uint32) error {
	var want []int64
	for _, id := range ids {
		if _, ok := t.nodes[id]; !ok {
			want = append(want, int64(id))
		}
	}
	if len(want) == 0 {
		return nil
	}
	return t.query(`SELECT `+nodeCols+` FROM `+t.s.t.nodes+` WHERE id = ANY($1)`, nil, want)
}

// query reads node rows of nodeCols into the transaction's cache, their IDs in
// *ids (when not nil) in the order read.
func (t *txn) query(sql string, ids *[]uint32, args ...any) error {
	rows, err := t.tx.Query(t.ctx, sql, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		id, n, err := scanNode(rows)
		if err != nil {
			return err
		}
		t.nodes[id] = n
		if ids != nil {
			*ids = append(*ids, id)
		}
	}
	return rows.Err()
}

// node reads the row of id, a node of the pool.
func (t *txn) node(id uint32) (node, error) {
	if n, ok := t.nodes[id]; ok {
		return n, nil
	}
	if err := t.fetch([]uint32{id}); err != nil {
		return node{}, err
	}
	n, ok := t.nodes[id]
	if !ok {
		return node{}, fmt.Errorf("node %d of a pool of %d has no row", id, t.m.nodes)
	}
	return n, nil
}

// put writes n as the row of id, whole.
func (t *txn) put(id uint32, n node) error {
	var nb, exp, gr, rn, tok *int64
	var req, key *string
	if l := n.lease; l != nil {
		token := int64(l.Token)
		nb, exp, gr, rn, tok, req, key = &l.NotBefore, &l.ExpiresAt, &l.GrantedAt, &l.RenewedAt, &token, &l.Requester, &l.KeyID
	}
	_, err := t.tx.Exec(t.ctx, `UPDATE `+t.s.t.nodes+` SET place = $2, free_seq = $3, watermark = $4, quar_until = $5,
		floor = $6, last_token = $7, restorable = $8, not_before = $9, expires_at = $10, granted_at = $11,
		renewed_at = $12, token = $13, requester = $14, key_id = $15 WHERE id = $1`,
		int64(id), int16(n.place), n.freeSeq, n.watermark, n.quarUntil, n.floor, n.lastToken, n.restorable,
		nb, exp, gr, rn, tok, req, key)
	if err != nil {
		return err
	}
	t.nodes[id] = n
	return nil
}

// place puts the free node n into the index its state at now calls for, at the
// back of the free order when back, counting the quarantine, and writes its row.
func (t *txn) place(id uint32, n node, back bool) error {
	if n.place == leasetx.Quarantine {
		t.m.quarantined--
	}
	n.lease = nil
	n.place = leasetx.FreePlace(n.quarUntil, n.fenced(), t.now)
	if n.place == leasetx.Quarantine {
		t.m.quarantined++
	}
	if back {
		t.m.freeSeq++
		n.freeSeq = t.m.freeSeq
	}
	return t.put(id, n)
}

// grow adds node IDs up to n: free, ready, watermark zero, at the back of the
// free order, in node ID order.
func (t *txn) grow(n int) error {
	if uint64(n) <= t.m.nodes {
		return nil
	}
	from, to := t.m.first+t.m.nodes, t.m.first+uint64(n)
	_, err := t.tx.Exec(t.ctx, `INSERT INTO `+t.s.t.nodes+` (id, place, free_seq, watermark, quar_until, floor,
		last_token, restorable) SELECT g, 1, $3 + (g - $1) + 1, $4, $4, $4, 0, false FROM generate_series($1::bigint, $2::bigint - 1) g`,
		int64(from), int64(to), t.m.freeSeq, leasetx.ZeroMs)
	if err != nil {
		return err
	}
	t.m.freeSeq += to - from
	t.m.nodes = uint64(n)
	return nil
}

// adopt checks p against the stored pool (leasetx.Adopt) and, on a store
// without a pool, records p's First and layout.
func (t *txn) adopt(p idkeeper.PoolSpec, shrinkOK bool) error {
	stored, err := t.pool()
	if err != nil {
		return err
	}
	if record, err := leasetx.Adopt(stored, p, shrinkOK); err != nil || !record {
		return err
	}
	t.m.first, t.m.layout = uint64(p.First), idkeeper.FormatLayout(p.LayoutOrDefault())
	return nil
}

// growTo grows the pool to p (leasetx.Adopt first).
func (t *txn) growTo(p idkeeper.PoolSpec) error {
	if err := t.adopt(p, false); err != nil {
		return err
	}
	return t.grow(p.Nodes)
}

// promote makes the moves time has made due: ended quarantines to ready or
// cooling, passed cooling watermarks to ready; the rows move in one statement.
func (t *txn) promote() error {
	if t.promoted {
		return nil
	}
	nt := t.s.t.nodes
	var fromQuar int64
	err := t.tx.QueryRow(t.ctx, `WITH due AS (
			SELECT id, place FROM `+nt+` WHERE place = 3 AND quar_until <= $1
			UNION ALL SELECT id, place FROM `+nt+` WHERE place = 2 AND greatest(watermark, floor) < $1),
		moved AS (UPDATE `+nt+` n SET place = CASE WHEN greatest(n.watermark, n.floor) < $1 THEN 1 ELSE 2 END
			FROM due WHERE n.id = due.id RETURNING due.place AS was)
		SELECT count(*) FILTER (WHERE was = 3) FROM moved`, t.now).Scan(&fromQuar)
	if err != nil {
		return err
	}
	t.m.quarantined -= fromQuar
	clear(t.nodes)
	t.promoted = true
	return nil
}
