package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/audit"
	"github.com/idkeeper/idkeeper/protocol"
)

// The audit log: a row per entry, and audit_head, one row with the Seq and Hash
// of the last entry ever appended (kept when its entry is pruned). An append is
// one transaction that moves the head only from the Seq and Hash the entry
// extends (an update conditioned on them) and inserts the entry.

const auditCols = `seq, at, actor, action, target, remote_ip, detail, prev, hash`

// AppendAudit implements account.Store.
func (s *Store) AppendAudit(ctx context.Context, e audit.Entry) error {
	return s.inTx(ctx, "append audit", func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE `+s.t.auditHd+` SET seq = $1, hash = $2 WHERE seq = $3 AND hash = $4`,
			int64(e.Seq), e.Hash, int64(e.Seq)-1, e.Prev)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 || e.Seq == 0 {
			return idkeeper.ErrConflict
		}
		_, err = tx.Exec(ctx, `INSERT INTO `+s.t.audit+` (`+auditCols+`) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
			int64(e.Seq), timeMs(e.At), e.Actor, e.Action, e.Target, e.RemoteIP, e.Detail, e.Prev, e.Hash)
		return err
	})
}

// AuditHead implements account.Store.
func (s *Store) AuditHead(ctx context.Context) (uint64, string, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var seq int64
	var hash string
	if err := s.pool.QueryRow(ctx, `SELECT seq, hash FROM `+s.t.auditHd).Scan(&seq, &hash); err != nil {
		return 0, "", s.wrap("audit head", err)
	}
	return uint64(seq), hash, nil
}

func checkLimit(limit, most int) error {
	if limit < 1 || limit > most {
		return protocol.Invalidf("limit", "limit must be 1 to %d, not %d", most, limit)
	}
	return nil
}

// AuditEntries implements account.Store.
func (s *Store) AuditEntries(ctx context.Context, from uint64, limit int) ([]audit.Entry, error) {
	if err := checkLimit(limit, maxAuditPage); err != nil {
		return nil, err
	}
	return s.auditQuery(ctx, `SELECT `+auditCols+` FROM `+s.t.audit+` WHERE seq >= $1 ORDER BY seq LIMIT $2`,
		int64(min(from, 1<<63-1)), limit)
}

// AuditEntriesBefore implements account.Store.
func (s *Store) AuditEntriesBefore(ctx context.Context, before uint64, limit int) ([]audit.Entry, error) {
	if err := checkLimit(limit, maxAuditPage); err != nil {
		return nil, err
	}
	if before == 0 || before > 1<<63-1 {
		before = 1<<63 - 1
	}
	return s.auditQuery(ctx, `SELECT `+auditCols+` FROM `+s.t.audit+` WHERE seq < $1 ORDER BY seq DESC LIMIT $2`,
		int64(before), limit)
}

func (s *Store) auditQuery(ctx context.Context, sql string, args ...any) ([]audit.Entry, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	rows, _ := s.pool.Query(ctx, sql, args...)
	out := []audit.Entry{}
	var e audit.Entry
	var seq, at int64
	_, err := pgx.ForEachRow(rows, []any{&seq, &at, &e.Actor, &e.Action, &e.Target, &e.RemoteIP, &e.Detail, &e.Prev, &e.Hash},
		func() error {
			e.Seq, e.At = uint64(seq), msTime(at)
			out = append(out, e)
			return nil
		})
	if err != nil {
		return nil, s.wrap("audit entries", err)
	}
	return out, nil
}

// PruneAudit implements account.Store: one statement deletes the oldest
// entries up to the first that is not before the cut-off, at most limit.
func (s *Store) PruneAudit(ctx context.Context, before time.Time, limit int) (int, error) {
	if err := checkLimit(limit, maxAuditPrune); err != nil {
		return 0, err
	}
	// The first entry, in Seq order, that stays bounds the run: entries after it
	// stay even when their At is before the cut-off (a clock stepped back).
	return s.execCount(ctx, "prune audit", `DELETE FROM `+s.t.audit+` WHERE seq IN (
		SELECT seq FROM `+s.t.audit+` WHERE at < $1 AND seq < coalesce((SELECT min(seq) FROM `+s.t.audit+` WHERE at >= $1),
		9223372036854775807) ORDER BY seq LIMIT $2)`, timeMs(before), limit)
}
