package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idkeeper/idkeeper/idempotency"
	"github.com/idkeeper/idkeeper/internal/idemowner"
)

// The records of the Idempotency-Key component (idempotency.Store and
// idempotency.CountingStore): a row per scope, with its owner (the Owned view's;
// "" for the plain methods) and its size. A Begin is one transaction: it locks
// the scope's row, returns it when live, else writes the marker with an upsert
// that replaces only a lapsed row; a capped Begin first takes an advisory lock of
// its owner for the transaction, so that the count of the owner's live rows and
// the write are one step for every Begin of that owner. Complete and Abort are
// one statement each, conditioned on the marker's token, owner and state. Times
// are the store's clock, truncated to the millisecond. The store never deletes a
// row by itself: run Purge now and then.

var _ idempotency.Store = (*Store)(nil)

// idemFixed is what a record costs in Stats beyond its strings: its times,
// state and outcome.
const idemFixed = 32

// Begin implements idempotency.Store for the records of owner "", never
// capped.
func (s *Store) Begin(ctx context.Context, scope, fingerprint, token string, lockFor time.Duration) (*idempotency.Record, bool, error) {
	return s.BeginOwned(ctx, "", 0, scope, fingerprint, token, lockFor)
}

// BeginOwned is Begin for owner's records, at most maxRecords live ones (0: no
// cap): the view of Owned (internal/idemowner) calls it.
func (s *Store) BeginOwned(ctx context.Context, owner string, maxRecords int, scope, fingerprint, token string, lockFor time.Duration) (*idempotency.Record, bool, error) {
	if err := idempotency.ValidateBegin(scope, fingerprint, token, lockFor); err != nil {
		return nil, false, err
	}
	var existing *idempotency.Record
	var started bool
	err := s.inTx(ctx, "idempotency begin", func(tx pgx.Tx) error {
		existing, started = nil, false
		now, err := s.nowMs(ctx, tx)
		if err != nil {
			return err
		}
		if maxRecords > 0 {
			if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended($1, 1))`,
				"idkeeper idempotency "+s.schema+" "+owner); err != nil {
				return err
			}
		}
		for range 3 {
			rec, err := s.idemLive(ctx, tx, scope, now)
			if err != nil || rec != nil {
				existing = rec
				return err
			}
			if maxRecords > 0 {
				var held int
				var first *int64
				if err := tx.QueryRow(ctx, `SELECT count(*), min(expires_at) FROM `+s.t.idem+` WHERE owner = $1 AND expires_at > $2`,
					owner, now).Scan(&held, &first); err != nil {
					return err
				}
				if held >= maxRecords {
					wait := time.Second
					if first != nil {
						wait = time.Duration(*first-now) * time.Millisecond
					}
					return idempotency.NewCapError(maxRecords, wait)
				}
			}
			until := now + lockFor.Milliseconds()
			size := len(scope) + len(fingerprint) + len(token) + idemFixed
			tag, err := tx.Exec(ctx, `INSERT INTO `+s.t.idem+` AS r (scope, owner, fingerprint, token, state, outcome, metadata, body,
				created_at, locked_until, expires_at, size) VALUES ($1, $2, $3, $4, $5, 0, NULL, NULL, $6, $7, $7, $8)
				ON CONFLICT (scope) DO UPDATE SET owner = excluded.owner, fingerprint = excluded.fingerprint,
				token = excluded.token, state = excluded.state, outcome = 0, metadata = NULL, body = NULL,
				created_at = excluded.created_at, locked_until = excluded.locked_until, expires_at = excluded.expires_at,
				size = excluded.size WHERE r.expires_at <= $6`,
				scope, owner, fingerprint, token, int16(idempotency.InFlight), now, until, size)
			if err != nil {
				return err
			}
			if started = tag.RowsAffected() == 1; started {
				return nil
			}
			// Another Begin wrote a live record after the read: read it.
		}
		return errors.New("postgres: idempotency begin: the record kept changing")
	})
	if err != nil {
		return nil, false, err
	}
	return existing, started, nil
}

// idemLive returns the live record of scope, locked for the transaction, or nil.
func (s *Store) idemLive(ctx context.Context, tx pgx.Tx, scope string, now int64) (*idempotency.Record, error) {
	r := idempotency.Record{Scope: scope}
	var state int16
	var meta []byte
	var created, locked, expires int64
	err := tx.QueryRow(ctx, `SELECT fingerprint, state, outcome, metadata, body, created_at, locked_until, expires_at
		FROM `+s.t.idem+` WHERE scope = $1 AND expires_at > $2 FOR UPDATE`, scope, now).
		Scan(&r.Fingerprint, &state, &r.Outcome, &meta, &r.Body, &created, &locked, &expires)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if meta != nil {
		if err := json.Unmarshal(meta, &r.Metadata); err != nil {
			return nil, errors.New("postgres: corrupt idempotency record " + scope + ": its metadata")
		}
	}
	r.State, r.CreatedAt, r.ExpiresAt = idempotency.State(state), msTime(created), msTime(expires)
	if r.State == idempotency.InFlight {
		r.LockedUntil = msTime(locked)
	}
	return &r, nil
}

// Complete implements idempotency.Store for the records of owner "".
func (s *Store) Complete(ctx context.Context, scope, token string, res idempotency.Stored, ttl time.Duration) error {
	return s.CompleteOwned(ctx, "", scope, token, res, ttl)
}

// CompleteOwned is Complete for owner's records.
func (s *Store) CompleteOwned(ctx context.Context, owner, scope, token string, res idempotency.Stored, ttl time.Duration) error {
	if err := idempotency.ValidateComplete(scope, token, res, ttl); err != nil {
		return err
	}
	var meta []byte
	if res.Metadata != nil {
		var err error
		if meta, err = json.Marshal(res.Metadata); err != nil {
			return err
		}
	}
	return s.inTx(ctx, "idempotency complete", func(tx pgx.Tx) error {
		now, err := s.nowMs(ctx, tx)
		if err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `UPDATE `+s.t.idem+` SET token = '', state = $5, outcome = $6, metadata = $7, body = $8,
			locked_until = 0, expires_at = $9, size = length(scope) + length(fingerprint) + $10
			WHERE scope = $1 AND owner = $2 AND token = $3 AND state = $4 AND locked_until > $11`,
			scope, owner, token, int16(idempotency.InFlight), int16(idempotency.Completed), res.Outcome,
			meta, res.Body, now+ttl.Milliseconds(), len(meta)+len(res.Body)+idemFixed, now)
		if err == nil && tag.RowsAffected() == 0 {
			return idempotency.ErrMarkerLost
		}
		return err
	})
}

// Abort implements idempotency.Store for the records of owner "".
func (s *Store) Abort(ctx context.Context, scope, token string) error {
	return s.AbortOwned(ctx, "", scope, token)
}

// AbortOwned is Abort for owner's records.
func (s *Store) AbortOwned(ctx context.Context, owner, scope, token string) error {
	if err := idempotency.ValidateAbort(scope, token); err != nil {
		return err
	}
	return s.exec(ctx, "idempotency abort", `DELETE FROM `+s.t.idem+` WHERE scope = $1 AND owner = $2 AND token = $3 AND state = $4`,
		scope, owner, token, int16(idempotency.InFlight))
}

// Owned implements idempotency.CountingStore.
func (s *Store) Owned(owner string, maxRecords int) idempotency.Store {
	return idemowner.View(s, owner, maxRecords)
}

// Stats implements idempotency.CountingStore: one aggregate over the live rows.
func (s *Store) Stats(ctx context.Context) (records, bytes int64, err error) {
	err = s.inTx(ctx, "idempotency stats", func(tx pgx.Tx) error {
		now, err := s.nowMs(ctx, tx)
		if err != nil {
			return err
		}
		return tx.QueryRow(ctx, `SELECT count(*), coalesce(sum(size), 0)::bigint FROM `+s.t.idem+` WHERE expires_at > $1`, now).
			Scan(&records, &bytes)
	})
	return records, bytes, err
}

// Purge deletes the lapsed idempotency records (ExpiresAt at or before now) in
// one statement and returns how many.
func (s *Store) Purge(ctx context.Context) (int, error) {
	var n int
	err := s.inTx(ctx, "idempotency purge", func(tx pgx.Tx) error {
		now, err := s.nowMs(ctx, tx)
		if err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `DELETE FROM `+s.t.idem+` WHERE expires_at <= $1`, now)
		n = int(tag.RowsAffected())
		return err
	})
	return n, err
}
