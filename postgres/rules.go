package postgres

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/internal/histrec"
	"github.com/idkeeper/idkeeper/internal/leasetx"
)

// rules is the transaction as the shared lease rules (internal/leasetx) use it:
// the meta row's lock serialises the steps (isolation), PostgreSQL's commit
// makes each atomic.
type rules struct{ t *txn }

var _ leasetx.Tx = rules{}

func (r rules) Now() int64                     { return r.t.now }
func (r rules) InPool(id idkeeper.NodeID) bool { return r.t.inPool(id) }
func (r rules) Fence() uint64                  { return r.t.m.fence }
func (r rules) NextToken() uint64              { r.t.m.fence++; return r.t.m.fence }
func (r rules) History() histrec.Log           { return histrec.Log{T: histTable{r.t}, Now: r.t.now} }
func (r rules) Promote() error                 { return r.t.promote() }

func (r rules) FreeNodes() int {
	return int(int64(r.t.m.nodes) - r.t.m.held - r.t.m.quarantined)
}

func (r rules) Node(id uint32) (leasetx.Node, error) {
	n, err := r.t.node(id)
	return n.tx(), err
}

func (r rules) Lease(id uint32) (leasetx.Lease, error) {
	n, err := r.t.node(id)
	if err != nil {
		return leasetx.Lease{}, err
	}
	if n.lease == nil {
		return leasetx.Lease{}, fmt.Errorf("node %d has no lease", id)
	}
	return *n.lease, nil
}

// Holding reads the requester's leases through the requester index of the
// nodes table, their rows with them.
func (r rules) Holding(key string) (leasetx.Holding, error) {
	t := r.t
	var ids []uint32
	err := t.query(`SELECT `+nodeCols+` FROM `+t.s.t.nodes+` WHERE place = 0 AND requester = $1 ORDER BY id`, &ids, key)
	if err != nil || len(ids) == 0 {
		return leasetx.Holding{}, err
	}
	h := leasetx.Holding{IDs: ids, Tokens: make([]uint64, len(ids))}
	for i, id := range ids {
		l := t.nodes[id].lease
		if i > 0 && l.KeyID != h.KeyID {
			return leasetx.Holding{}, fmt.Errorf("requester %q holds leases of two API keys", key)
		}
		h.Tokens[i], h.KeyID = l.Token, l.KeyID
	}
	return h, nil
}

// PutHolding writes nothing: the requester index is the leases' own (Take and
// Free keep it), and the rules put what those left.
func (rules) PutHolding(string, leasetx.Holding) error { return nil }

func (r rules) KeyHeld(keyID string) (int, error) {
	var n int
	err := r.t.tx.QueryRow(r.t.ctx, `SELECT count(*) FROM `+r.t.s.t.nodes+` WHERE place = 0 AND key_id = $1`, keyID).Scan(&n)
	return n, err
}

func (r rules) Charges(keyID string) ([]leasetx.Charge, error) {
	rows, err := r.t.tx.Query(r.t.ctx, `SELECT node, until, token FROM `+r.t.s.t.charges+` WHERE key_id = $1 ORDER BY ord`, keyID)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (leasetx.Charge, error) {
		var c leasetx.Charge
		var id int64
		err := row.Scan(&id, &c.Until, &c.Token)
		c.ID = uint32(id)
		return c, err
	})
}

func (r rules) PutCharges(keyID string, old, cs []leasetx.Charge) error {
	if slices.Equal(old, cs) {
		return nil
	}
	t := r.t
	if len(old) > 0 {
		if _, err := t.tx.Exec(t.ctx, `DELETE FROM `+t.s.t.charges+` WHERE key_id = $1`, keyID); err != nil {
			return err
		}
	}
	if len(cs) == 0 {
		return nil
	}
	ids, until, tokens := make([]int64, len(cs)), make([]int64, len(cs)), make([]int64, len(cs))
	for i, c := range cs {
		ids[i], until[i], tokens[i] = int64(c.ID), c.Until, int64(c.Token)
	}
	_, err := t.tx.Exec(t.ctx, `INSERT INTO `+t.s.t.charges+` (key_id, ord, node, until, token)
		SELECT $1, o, n, u, k FROM unnest($2::bigint[], $3::bigint[], $4::bigint[]) WITH ORDINALITY AS c(n, u, k, o)`,
		keyID, ids, until, tokens)
	return err
}

// ReadAhead reads the rows of h's nodes and of the possible claims' in one
// statement.
func (r rules) ReadAhead(h leasetx.Holding, claims []idkeeper.Claim) error {
	ids := slices.Clone(h.IDs)
	for _, c := range claims {
		if c.Possible() && r.t.inPool(c.NodeID) {
			ids = append(ids, uint32(c.NodeID))
		}
	}
	return r.t.fetch(ids)
}

// Scan reads the rows of the first n nodes of the free index p, through its
// partial index.
func (r rules) Scan(p leasetx.Place, n int) ([]uint32, error) {
	t := r.t
	order := `free_seq`
	if p == leasetx.Cooling {
		order = `greatest(watermark, floor), free_seq`
	}
	ids := make([]uint32, 0, n)
	err := t.query(`SELECT `+nodeCols+` FROM `+t.s.t.nodes+` WHERE place = $1 ORDER BY `+order+` LIMIT $2`,
		&ids, int16(p), n)
	return ids, err
}

func (r rules) Take(id uint32, l leasetx.Lease, n leasetx.Node) error {
	t := r.t
	rec, err := t.node(id)
	if err != nil {
		return err
	}
	if rec.place == leasetx.Held {
		return fmt.Errorf("node %d is held already", id)
	}
	if rec.place == leasetx.Quarantine {
		t.m.quarantined--
	}
	rec.set(n)
	rec.place, rec.lease = leasetx.Held, &l
	t.m.held++
	return t.put(id, rec)
}

func (r rules) Extend(id uint32, old, l leasetx.Lease) error {
	rec, err := r.t.node(id)
	if err != nil {
		return err
	}
	if rec.lease == nil {
		return fmt.Errorf("node %d is in a requester index but holds no lease", id)
	}
	rec.lease, rec.watermark = &l, max(rec.watermark, l.ExpiresAt)
	return r.t.put(id, rec)
}

func (r rules) Free(id uint32, l leasetx.Lease, n leasetx.Node) error {
	rec, err := r.t.node(id)
	if err != nil {
		return err
	}
	if rec.place != leasetx.Held {
		return fmt.Errorf("node %d is free already", id)
	}
	rec.set(n)
	r.t.m.held--
	return r.t.place(id, rec, true)
}

// set stores what the shared rules decide of the row: its watermark,
// quarantine, last token and restorable flag (its place is the store's).
func (n *node) set(x leasetx.Node) {
	n.watermark, n.quarUntil, n.lastToken, n.restorable = x.Watermark, x.QuarUntil, x.LastToken, x.Restorable
}

// histTable is the transaction's lease history (histrec.Table): one row per
// record, its JSON and, once it ended, its end for PruneHistory's index.
type histTable struct{ t *txn }

func (h histTable) Get(node uint32, token uint64) (histrec.Rec, bool, error) {
	var v []byte
	err := h.t.tx.QueryRow(h.t.ctx, `SELECT rec FROM `+h.t.s.t.history+` WHERE node = $1 AND token = $2`,
		int64(node), int64(token)).Scan(&v)
	if errors.Is(err, pgx.ErrNoRows) {
		return histrec.Rec{}, false, nil
	}
	if err != nil {
		return histrec.Rec{}, false, err
	}
	r, err := decodeRec(node, token, v)
	return r, err == nil, err
}

func (h histTable) Put(node uint32, token uint64, r histrec.Rec, _ *histrec.Rec) error {
	v, err := json.Marshal(r)
	if err != nil {
		return err
	}
	var ended *int64
	if r.End != "" {
		ended = &r.EndedAt
	}
	_, err = h.t.tx.Exec(h.t.ctx, `INSERT INTO `+h.t.s.t.history+` (node, token, rec, ended_at) VALUES ($1, $2, $3, $4)
		ON CONFLICT (node, token) DO UPDATE SET rec = EXCLUDED.rec, ended_at = EXCLUDED.ended_at`,
		int64(node), int64(token), v, ended)
	return err
}

func decodeRec(node uint32, token uint64, v []byte) (histrec.Rec, error) {
	var r histrec.Rec
	if err := json.Unmarshal(v, &r); err != nil {
		return histrec.Rec{}, fmt.Errorf("history record of node %d token %d: %w", node, token, err)
	}
	return r, nil
}
