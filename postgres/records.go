package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idkeeper/idkeeper"
)

// The records outside the lease pool: job locks, API keys and clock-skew
// observations, a row each. A change is one statement, or one transaction that
// locks the row (SELECT … FOR UPDATE) before it decides.

// TryLock implements idkeeper.LockStore, timed by the store's clock: a lock is
// free once now reaches its Until. One statement: an insert that, on a held
// name, replaces the row only when it has lapsed.
func (s *Store) TryLock(ctx context.Context, name, owner string, atMostFor time.Duration) (idkeeper.Lock, bool, error) {
	var l idkeeper.Lock
	var got bool
	err := s.inTx(ctx, "trylock", func(tx pgx.Tx) error {
		now, err := s.nowMs(ctx, tx)
		if err != nil {
			return err
		}
		until := now + atMostFor.Milliseconds()
		var o string
		var at, u int64
		err = tx.QueryRow(ctx, `INSERT INTO `+s.t.locks+` AS l (name, owner, locked_at, until) VALUES ($1, $2, $3, $4)
			ON CONFLICT (name) DO UPDATE SET owner = excluded.owner, locked_at = excluded.locked_at, until = excluded.until
			WHERE l.until <= $3 RETURNING owner, locked_at, until`, name, owner, now, until).Scan(&o, &at, &u)
		if errors.Is(err, pgx.ErrNoRows) {
			got = false
			err = tx.QueryRow(ctx, `SELECT owner, locked_at, until FROM `+s.t.locks+` WHERE name = $1`, name).Scan(&o, &at, &u)
		} else {
			got = true
		}
		l = idkeeper.Lock{Name: name, Owner: o, LockedAt: msTime(at), Until: msTime(u)}
		return err
	})
	if err != nil {
		return idkeeper.Lock{}, false, err
	}
	return l, got, nil
}

// Unlock implements idkeeper.LockStore: a lock whose Until has passed is no
// longer held; Unlock leaves it alone and reports false.
func (s *Store) Unlock(ctx context.Context, name, owner string, atLeastFor time.Duration) (bool, error) {
	var held bool
	err := s.inTx(ctx, "unlock", func(tx pgx.Tx) error {
		now, err := s.nowMs(ctx, tx)
		if err != nil {
			return err
		}
		var at int64
		err = tx.QueryRow(ctx, `SELECT locked_at FROM `+s.t.locks+` WHERE name = $1 AND owner = $2 AND until > $3 FOR UPDATE`,
			name, owner, now).Scan(&at)
		if held = err == nil; !held {
			if errors.Is(err, pgx.ErrNoRows) {
				return nil
			}
			return err
		}
		if keep := at + atLeastFor.Milliseconds(); keep > now {
			_, err = tx.Exec(ctx, `UPDATE `+s.t.locks+` SET until = $2 WHERE name = $1`, name, keep)
			return err
		}
		_, err = tx.Exec(ctx, `DELETE FROM `+s.t.locks+` WHERE name = $1`, name)
		return err
	})
	return held, err
}

// Locks implements idkeeper.LockStore.
func (s *Store) Locks(ctx context.Context) ([]idkeeper.Lock, error) {
	out := []idkeeper.Lock{}
	err := s.inTx(ctx, "locks", func(tx pgx.Tx) error {
		out = out[:0]
		now, err := s.nowMs(ctx, tx)
		if err != nil {
			return err
		}
		rows, _ := tx.Query(ctx, `SELECT name, owner, locked_at, until FROM `+s.t.locks+` WHERE until > $1 ORDER BY name COLLATE "C"`, now)
		var l idkeeper.Lock
		var at, u int64
		_, err = pgx.ForEachRow(rows, []any{&l.Name, &l.Owner, &at, &u}, func() error {
			l.LockedAt, l.Until = msTime(at), msTime(u)
			out = append(out, l)
			return nil
		})
		return err
	})
	return out, err
}

const apiKeyCols = `id, hash, description, created_at, created_by, expires_at, max_nodes, bootstrap, admin, revoked_at, last_used_at`

// apiKeyRow scans a row of apiKeyCols.
type apiKeyRow struct {
	k                                   idkeeper.APIKey
	created, expires, revoked, lastUsed int64
}

func (r *apiKeyRow) dest() []any {
	return []any{&r.k.ID, &r.k.Hash, &r.k.Description, &r.created, &r.k.CreatedBy, &r.expires, &r.k.MaxNodes,
		&r.k.Bootstrap, &r.k.Admin, &r.revoked, &r.lastUsed}
}

func (r *apiKeyRow) key() idkeeper.APIKey {
	k := r.k
	k.CreatedAt, k.ExpiresAt, k.RevokedAt, k.LastUsedAt = msTime(r.created), msTime(r.expires), msTime(r.revoked), msTime(r.lastUsed)
	return k
}

// CreateAPIKey implements idkeeper.KeyStore.
func (s *Store) CreateAPIKey(ctx context.Context, k idkeeper.APIKey) error {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	hash := k.Hash
	if hash == nil {
		hash = []byte{}
	}
	tag, err := s.pool.Exec(ctx, `INSERT INTO `+s.t.apiKeys+` (`+apiKeyCols+`) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
		ON CONFLICT (id) DO NOTHING`, k.ID, hash, k.Description, timeMs(k.CreatedAt), k.CreatedBy, timeMs(k.ExpiresAt),
		k.MaxNodes, k.Bootstrap, k.Admin, timeMs(k.RevokedAt), timeMs(k.LastUsedAt))
	if err != nil {
		return s.wrap("create api key", err)
	}
	if tag.RowsAffected() == 0 {
		return idkeeper.ErrConflict
	}
	return nil
}

// APIKey implements idkeeper.KeyStore.
func (s *Store) APIKey(ctx context.Context, id string) (idkeeper.APIKey, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var r apiKeyRow
	err := s.pool.QueryRow(ctx, `SELECT `+apiKeyCols+` FROM `+s.t.apiKeys+` WHERE id = $1`, id).Scan(r.dest()...)
	if errors.Is(err, pgx.ErrNoRows) {
		return idkeeper.APIKey{}, idkeeper.ErrNotFound
	}
	if err != nil {
		return idkeeper.APIKey{}, s.wrap("api key", err)
	}
	return r.key(), nil
}

// APIKeys implements idkeeper.KeyStore.
func (s *Store) APIKeys(ctx context.Context) ([]idkeeper.APIKey, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	rows, _ := s.pool.Query(ctx, `SELECT `+apiKeyCols+` FROM `+s.t.apiKeys+` ORDER BY id COLLATE "C"`)
	out := []idkeeper.APIKey{}
	var r apiKeyRow
	_, err := pgx.ForEachRow(rows, r.dest(), func() error {
		out = append(out, r.key())
		return nil
	})
	if err != nil {
		return nil, s.wrap("api keys", err)
	}
	return out, nil
}

// notRevoked is revoked_at of a key that is not revoked: Go's zero time.
var notRevoked = time.Time{}.UnixMilli()

// RevokeAPIKey implements idkeeper.KeyStore: one update of a key not revoked
// yet; when it matches no row, a read tells a revoked key from a missing one.
func (s *Store) RevokeAPIKey(ctx context.Context, id string, at time.Time) error {
	return s.inTx(ctx, "revoke api key", func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE `+s.t.apiKeys+` SET revoked_at = $2 WHERE id = $1 AND revoked_at = $3`,
			id, timeMs(at), notRevoked)
		if err != nil || tag.RowsAffected() == 1 {
			return err
		}
		_, err = s.apiKeyIn(ctx, tx, id)
		return err
	})
}

// TouchAPIKey implements idkeeper.KeyStore: one statement.
func (s *Store) TouchAPIKey(ctx context.Context, id string, at time.Time) error {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	_, err := s.pool.Exec(ctx, `UPDATE `+s.t.apiKeys+` SET last_used_at = $2 WHERE id = $1 AND last_used_at < $2`, id, timeMs(at))
	return s.wrap("touch api key", err)
}

// UpdateAPIKey implements idkeeper.KeyStore: one update of a key not revoked,
// setting the fields u names, that returns the key; when it matches no row, a
// read tells a revoked key (ErrConflict) from a missing one.
func (s *Store) UpdateAPIKey(ctx context.Context, id string, u idkeeper.KeyUpdate) (idkeeper.APIKey, error) {
	var exp *int64
	if u.ExpiresAt != nil {
		ms := timeMs(*u.ExpiresAt)
		exp = &ms
	}
	var out idkeeper.APIKey
	err := s.inTx(ctx, "update api key", func(tx pgx.Tx) error {
		var r apiKeyRow
		err := tx.QueryRow(ctx, `UPDATE `+s.t.apiKeys+` SET expires_at = coalesce($2, expires_at),
			max_nodes = coalesce($3, max_nodes) WHERE id = $1 AND revoked_at = $4 RETURNING `+apiKeyCols,
			id, exp, u.MaxNodes, notRevoked).Scan(r.dest()...)
		if err == nil {
			out = r.key()
			return nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		if _, err := s.apiKeyIn(ctx, tx, id); err != nil {
			return err
		}
		return idkeeper.ErrConflict
	})
	if err != nil {
		return idkeeper.APIKey{}, err
	}
	return out, nil
}

// apiKeyIn reads the key in tx; ErrNotFound when there is none.
func (s *Store) apiKeyIn(ctx context.Context, tx pgx.Tx, id string) (idkeeper.APIKey, error) {
	var r apiKeyRow
	err := tx.QueryRow(ctx, `SELECT `+apiKeyCols+` FROM `+s.t.apiKeys+` WHERE id = $1`, id).Scan(r.dest()...)
	if errors.Is(err, pgx.ErrNoRows) {
		return idkeeper.APIKey{}, idkeeper.ErrNotFound
	}
	return r.key(), err
}

// RecordSkew implements idkeeper.SkewStore: one upsert; the observation lapses
// at the store's now + ttl.
func (s *Store) RecordSkew(ctx context.Context, o idkeeper.SkewObservation, ttl time.Duration) error {
	return s.inTx(ctx, "record skew", func(tx pgx.Tx) error {
		now, err := s.nowMs(ctx, tx)
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `INSERT INTO `+s.t.skew+` (requester, skew, threshold, level, observed_at, remote_ip, operation, lapse)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (requester) DO UPDATE SET skew = excluded.skew,
			threshold = excluded.threshold, level = excluded.level, observed_at = excluded.observed_at,
			remote_ip = excluded.remote_ip, operation = excluded.operation, lapse = excluded.lapse`,
			o.Requester.Key(), int64(o.Skew), int64(o.Threshold), string(o.Level), timeMs(o.ObservedAt), o.RemoteIP,
			o.Operation, now+ttl.Milliseconds())
		return err
	})
}

// SkewObservations implements idkeeper.SkewStore: it deletes the lapsed
// observations and reads the others, in one transaction.
func (s *Store) SkewObservations(ctx context.Context) ([]idkeeper.SkewObservation, error) {
	out := []idkeeper.SkewObservation{}
	err := s.inTx(ctx, "skew observations", func(tx pgx.Tx) error {
		out = out[:0]
		now, err := s.nowMs(ctx, tx)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM `+s.t.skew+` WHERE lapse <= $1`, now); err != nil {
			return err
		}
		rows, _ := tx.Query(ctx, `SELECT requester, skew, threshold, level, observed_at, remote_ip, operation FROM `+s.t.skew+`
			WHERE lapse > $1 ORDER BY requester COLLATE "C"`, now)
		var key, level string
		var o idkeeper.SkewObservation
		var skew, threshold, at int64
		_, err = pgx.ForEachRow(rows, []any{&key, &skew, &threshold, &level, &at, &o.RemoteIP, &o.Operation}, func() error {
			req, err := idkeeper.ParseRequesterKey(key)
			if err != nil {
				return err
			}
			o.Requester, o.Skew, o.Threshold, o.Level, o.ObservedAt = req, time.Duration(skew), time.Duration(threshold),
				idkeeper.SkewLevel(level), msTime(at)
			out = append(out, o)
			return nil
		})
		return err
	})
	return out, err
}
