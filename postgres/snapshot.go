package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/allowlist"
	"github.com/idkeeper/idkeeper/audit"
	"github.com/idkeeper/idkeeper/internal/histrec"
	"github.com/idkeeper/idkeeper/internal/leasetx"
	"github.com/idkeeper/idkeeper/protocol"
	"github.com/idkeeper/idkeeper/snapshot"
)

var _ snapshot.Store = (*Store)(nil)

// copyBatch is how many records a snapshot load holds before it copies them in.
const copyBatch = 1000

// ReadSnapshot implements snapshot.Store, from one consistent view: a
// read-only REPEATABLE READ transaction, whose rows stream by as they are
// emitted.
func (s *Store) ReadSnapshot(ctx context.Context, meta func(snapshot.Meta) error, emit func(snapshot.Record) error) error {
	return s.view(ctx, "read snapshot", func(t *txn) error {
		g, ok := t.generation()
		if !ok {
			return idkeeper.ErrNotInitialised
		}
		pool, err := t.pool()
		if err != nil {
			return err
		}
		m := snapshot.Meta{Generation: g, Fence: t.m.fence, Nodes: pool.Nodes, First: pool.First, Layout: pool.Layout}
		var seq int64
		if err := t.tx.QueryRow(ctx, `SELECT seq, hash FROM `+s.t.auditHd).Scan(&seq, &m.AuditHash); err != nil {
			return err
		}
		m.AuditSeq = uint64(seq)
		if err := meta(m); err != nil {
			return err
		}
		for _, part := range []func(*txn, func(snapshot.Record) error) error{snapNodes, snapKeys, snapUsers, snapAllow,
			snapAudit, snapHistory} {
			if err := part(t, emit); err != nil {
				return err
			}
		}
		return nil
	})
}

func snapNodes(t *txn, emit func(snapshot.Record) error) error {
	rows, err := t.tx.Query(t.ctx, `SELECT `+nodeCols+` FROM `+t.s.t.nodes+` ORDER BY id`)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		id, n, err := scanNode(rows)
		if err != nil {
			return err
		}
		st := n.state(id)
		if n.lease != nil {
			l, err := n.lease.On(id)
			if err != nil {
				return err
			}
			st.Lease = &l
		}
		if err := emit(snapshot.Record{Node: &st}); err != nil {
			return err
		}
	}
	return rows.Err()
}

func snapKeys(t *txn, emit func(snapshot.Record) error) error {
	rows, _ := t.tx.Query(t.ctx, `SELECT `+apiKeyCols+` FROM `+t.s.t.apiKeys+` ORDER BY id COLLATE "C"`)
	var r apiKeyRow
	_, err := pgx.ForEachRow(rows, r.dest(), func() error {
		k := r.key()
		return emit(snapshot.Record{Key: &k})
	})
	return err
}

func snapUsers(t *txn, emit func(snapshot.Record) error) error {
	rows, _ := t.tx.Query(t.ctx, `SELECT `+userCols+` FROM `+t.s.t.users+` ORDER BY name COLLATE "C"`)
	var r userRow
	_, err := pgx.ForEachRow(rows, r.dest(), func() error {
		u := r.user()
		return emit(snapshot.Record{User: &u})
	})
	return err
}

func snapAllow(t *txn, emit func(snapshot.Record) error) error {
	rows, _ := t.tx.Query(t.ctx, `SELECT prefix, note, created_by, created_at FROM `+t.s.t.allow+` ORDER BY sort_key`)
	var prefix string
	var e allowlist.Entry
	var at int64
	_, err := pgx.ForEachRow(rows, []any{&prefix, &e.Note, &e.CreatedBy, &at}, func() error {
		p, err := netip.ParsePrefix(prefix)
		if err != nil {
			return fmt.Errorf("corrupt allow-list entry %q", prefix)
		}
		x := e
		x.Prefix, x.CreatedAt = p, msTime(at)
		return emit(snapshot.Record{Allow: &x})
	})
	return err
}

func snapAudit(t *txn, emit func(snapshot.Record) error) error {
	rows, _ := t.tx.Query(t.ctx, `SELECT `+auditCols+` FROM `+t.s.t.audit+` ORDER BY seq`)
	var e audit.Entry
	var seq, at int64
	_, err := pgx.ForEachRow(rows, []any{&seq, &at, &e.Actor, &e.Action, &e.Target, &e.RemoteIP, &e.Detail, &e.Prev, &e.Hash},
		func() error {
			x := e
			x.Seq, x.At = uint64(seq), msTime(at)
			return emit(snapshot.Record{Audit: &x})
		})
	return err
}

func snapHistory(t *txn, emit func(snapshot.Record) error) error {
	rows, _ := t.tx.Query(t.ctx, `SELECT node, token, rec FROM `+t.s.t.history+` ORDER BY node, token`)
	var node, token int64
	var v []byte
	_, err := pgx.ForEachRow(rows, []any{&node, &token, &v}, func() error {
		r, err := decodeRec(uint32(node), uint64(token), v)
		if err != nil {
			return err
		}
		h := r.Record(uint32(node), uint64(token))
		return emit(snapshot.Record{History: &h})
	})
	return err
}

// LoadSnapshot implements snapshot.Store in one transaction: it locks the
// meta row (lease steps wait), deletes the records a snapshot replaces, copies
// the snapshot's in (COPY, copyBatch records at a time: the records a load holds), writes the meta row and
// the audit head and commits; any error rolls it all back, and until the
// commit every other session reads the state as it was. Free node IDs are
// freed in NodeID order.
func (s *Store) LoadSnapshot(ctx context.Context, head snapshot.Meta, src snapshot.Source) error {
	chk, err := snapshot.NewChecker(head)
	if err != nil {
		return err
	}
	l := &loader{s: s, ctx: ctx}
	_, err = leasetx.Load(ctx, chk, src, leasetx.Staging{
		Start:  func() error { return l.start(head) },
		Add:    l.add,
		Finish: func() error { return l.finish(head) },
		Swap:   func() error { return l.tx.Commit(ctx) },
		Drop: func() {
			if l.tx != nil {
				l.tx.Rollback(context.WithoutCancel(ctx))
			}
		},
	})
	return s.wrap("load snapshot", err)
}

// loader is one snapshot load's transaction and the rows it has yet to copy.
type loader struct {
	s     *Store
	ctx   context.Context
	tx    pgx.Tx
	t     *txn
	table string
	cols  []string
	rows  [][]any
}

// start opens the load's transaction, checks the pool and deletes what the
// snapshot replaces; on an error it rolls back (leasetx.Load drops only after
// a Start that succeeded).
func (l *loader) start(head snapshot.Meta) error {
	tx, err := l.s.pool.BeginTx(l.ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return err
	}
	l.tx = tx
	if err := l.prepare(head); err != nil {
		tx.Rollback(context.WithoutCancel(l.ctx))
		l.tx = nil
		return err
	}
	return nil
}

func (l *loader) prepare(head snapshot.Meta) error {
	tx := l.tx
	var err error
	if l.t, err = l.s.begin(l.ctx, tx, nil); err != nil {
		return err
	}
	live, err := l.t.pool()
	if err != nil {
		return err
	}
	if live.Nodes > 0 && !live.SameSpace(head.Pool()) {
		return idkeeper.PoolMismatch(live, head.Pool())
	}
	st := l.s.t
	for _, tb := range []string{st.nodes, st.charges, st.history, st.apiKeys, st.users, st.sessions, st.allow, st.audit} {
		if _, err := tx.Exec(l.ctx, `DELETE FROM `+tb); err != nil {
			return err
		}
	}
	l.t.m = meta{}
	l.t.setGeneration(head.Generation)
	l.t.m.fence, l.t.m.first, l.t.m.nodes = head.Fence, uint64(head.First), uint64(head.Nodes)
	l.t.m.layout = idkeeper.FormatLayout(head.Pool().LayoutOrDefault())
	return nil
}

func (l *loader) add(rec snapshot.Record) error {
	switch {
	case rec.Node != nil:
		return l.node(rec.Node)
	case rec.Key != nil:
		k := rec.Key
		hash := k.Hash
		if hash == nil {
			hash = []byte{}
		}
		return l.put("api_keys", apiKeyCols, k.ID, hash, k.Description, timeMs(k.CreatedAt), k.CreatedBy,
			timeMs(k.ExpiresAt), int32(k.MaxNodes), k.Bootstrap, k.Admin, timeMs(k.RevokedAt), timeMs(k.LastUsedAt))
	case rec.User != nil:
		return l.put("users", userCols, userArgs(*rec.User)...)
	case rec.Allow != nil:
		p := rec.Allow.Prefix.Masked()
		return l.put("allow_list", `sort_key, prefix, note, created_by, created_at`, allowKey(p), p.String(),
			rec.Allow.Note, rec.Allow.CreatedBy, timeMs(rec.Allow.CreatedAt))
	case rec.Audit != nil:
		e := rec.Audit
		return l.put("audit", auditCols, int64(e.Seq), timeMs(e.At), e.Actor, e.Action, e.Target, e.RemoteIP,
			e.Detail, e.Prev, e.Hash)
	case rec.History != nil:
		r := histrec.Of(*rec.History)
		v, err := json.Marshal(r)
		if err != nil {
			return err
		}
		var ended *int64
		if r.End != "" {
			ended = &r.EndedAt
		}
		return l.put("history", `node, token, rec, ended_at`, int64(rec.History.NodeID), int64(rec.History.Token), v, ended)
	}
	return nil
}

// node stages a node's row: held with its lease, or free in the index its
// state at now calls for, freed after the nodes before it.
func (l *loader) node(st *idkeeper.NodeState) error {
	t := l.t
	n := node{watermark: timeMs(st.Watermark), quarUntil: timeMs(st.QuarantinedUntil), floor: timeMs(st.Floor),
		lastToken: st.LastToken, restorable: st.Restorable}
	var nb, exp, gr, rn, tok *int64
	var req, key *string
	if ls := st.Lease; ls != nil {
		x := leasetx.Lease{NotBefore: timeMs(ls.NotBefore), ExpiresAt: timeMs(ls.ExpiresAt), GrantedAt: timeMs(ls.GrantedAt),
			RenewedAt: timeMs(ls.RenewedAt), Token: ls.FencingToken, Requester: ls.Requester.Key(), KeyID: ls.KeyID}
		token := int64(x.Token)
		nb, exp, gr, rn, tok, req, key = &x.NotBefore, &x.ExpiresAt, &x.GrantedAt, &x.RenewedAt, &token, &x.Requester, &x.KeyID
		n.place = leasetx.Held
		t.m.held++
	} else {
		n.place = leasetx.FreePlace(n.quarUntil, n.fenced(), t.now)
		t.m.freeSeq++
		n.freeSeq = t.m.freeSeq
		if n.place == leasetx.Quarantine {
			t.m.quarantined++
		}
	}
	return l.put("nodes", nodeCols, int64(st.NodeID), int16(n.place), n.freeSeq, n.watermark, n.quarUntil, n.floor,
		n.lastToken, n.restorable, nb, exp, gr, rn, tok, req, key)
}

// put stages one row of table, flushing the rows of the table before.
func (l *loader) put(table, cols string, vals ...any) error {
	if table != l.table {
		if err := l.flush(); err != nil {
			return err
		}
		l.table, l.cols = table, splitCols(cols)
	}
	l.rows = append(l.rows, vals)
	if len(l.rows) >= l.s.loadBatch {
		return l.flush()
	}
	return nil
}

func (l *loader) flush() error {
	if len(l.rows) == 0 {
		return nil
	}
	_, err := l.tx.CopyFrom(l.ctx, pgx.Identifier{l.s.schema, l.table}, l.cols, pgx.CopyFromRows(l.rows))
	l.rows = l.rows[:0]
	return err
}

func (l *loader) finish(head snapshot.Meta) error {
	if err := l.flush(); err != nil {
		return err
	}
	var req, keyA, keyB string
	err := l.tx.QueryRow(l.ctx, `SELECT requester, min(key_id), max(key_id) FROM `+l.s.t.nodes+` WHERE place = 0
		GROUP BY requester HAVING min(key_id) <> max(key_id) LIMIT 1`).Scan(&req, &keyA, &keyB)
	if err == nil {
		return protocol.Invalidf("snapshot", "requester %s holds leases of the API keys %q and %q: "+
			"a requester's leases belong to one key", req, keyA, keyB)
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return err
	}
	if _, err := l.tx.Exec(l.ctx, `UPDATE `+l.s.t.auditHd+` SET seq = $1, hash = $2`, int64(head.AuditSeq), head.AuditHash); err != nil {
		return err
	}
	l.t.m0 = meta0
	return l.t.flush()
}

// meta0 is no meta row at all: a flush after a load always writes.
var meta0 = meta{genID: "\x00"}

// splitCols splits a column list of the form "a, b, c".
func splitCols(cols string) []string {
	out := strings.Split(cols, ",")
	for i := range out {
		out[i] = strings.TrimSpace(out[i])
	}
	return out
}
