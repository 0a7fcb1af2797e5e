package postgres

import (
	"context"
	"errors"
	"net/netip"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/account"
	"github.com/idkeeper/idkeeper/allowlist"
	"github.com/idkeeper/idkeeper/protocol"
)

// The admin records (account.Store): accounts, sessions, the allow-list and
// the audit log (audit.go), a row each. Creates are inserts that do nothing on a
// conflict (ErrConflict); UpdateUser is an update conditioned on the stored
// Version; the changes of many rows are one statement each.

var _ account.Store = (*Store)(nil)

// Bounds of the admin reads.
const (
	maxAuditPage  = 1000
	maxAuditPrune = 10000
)

const userCols = `name, role, password_hash, disabled, created_at, created_by, epoch, password_changed_at, last_login_at, webhook, version`

type userRow struct {
	u                       account.User
	role                    string
	created, changed, login int64
}

func (r *userRow) dest() []any {
	return []any{&r.u.Name, &r.role, &r.u.PasswordHash, &r.u.Disabled, &r.created, &r.u.CreatedBy, &r.u.Epoch,
		&r.changed, &r.login, &r.u.Webhook, &r.u.Version}
}

func (r *userRow) user() account.User {
	u := r.u
	u.Role, u.CreatedAt, u.PasswordChangedAt, u.LastLoginAt = account.Role(r.role), msTime(r.created), msTime(r.changed), msTime(r.login)
	return u
}

func userArgs(u account.User) []any {
	return []any{u.Name, string(u.Role), u.PasswordHash, u.Disabled, timeMs(u.CreatedAt), u.CreatedBy, u.Epoch,
		timeMs(u.PasswordChangedAt), timeMs(u.LastLoginAt), u.Webhook, u.Version}
}

// CreateUser implements account.Store.
func (s *Store) CreateUser(ctx context.Context, u account.User) error {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	u.Version = 1
	tag, err := s.pool.Exec(ctx, `INSERT INTO `+s.t.users+` (`+userCols+`) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
		ON CONFLICT (name) DO NOTHING`, userArgs(u)...)
	if err != nil {
		return s.wrap("create user", err)
	}
	if tag.RowsAffected() == 0 {
		return idkeeper.ErrConflict
	}
	return nil
}

// User implements account.Store.
func (s *Store) User(ctx context.Context, name string) (account.User, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var r userRow
	err := s.pool.QueryRow(ctx, `SELECT `+userCols+` FROM `+s.t.users+` WHERE name = $1`, name).Scan(r.dest()...)
	if errors.Is(err, pgx.ErrNoRows) {
		return account.User{}, idkeeper.ErrNotFound
	}
	if err != nil {
		return account.User{}, s.wrap("user", err)
	}
	return r.user(), nil
}

// Users implements account.Store.
func (s *Store) Users(ctx context.Context) ([]account.User, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	rows, _ := s.pool.Query(ctx, `SELECT `+userCols+` FROM `+s.t.users+` ORDER BY name COLLATE "C"`)
	out := []account.User{}
	var r userRow
	_, err := pgx.ForEachRow(rows, r.dest(), func() error {
		out = append(out, r.user())
		return nil
	})
	if err != nil {
		return nil, s.wrap("users", err)
	}
	return out, nil
}

// UpdateUser implements account.Store: one update conditioned on the stored
// Version; when it matches no row, a read tells ErrNotFound from ErrConflict.
func (s *Store) UpdateUser(ctx context.Context, u account.User) error {
	return s.inTx(ctx, "update user", func(tx pgx.Tx) error {
		nu := u
		nu.Version = u.Version + 1
		args := append(userArgs(nu), u.Version)
		tag, err := tx.Exec(ctx, `UPDATE `+s.t.users+` SET role = $2, password_hash = $3, disabled = $4, created_at = $5,
			created_by = $6, epoch = $7, password_changed_at = $8, last_login_at = $9, webhook = $10, version = $11
			WHERE name = $1 AND version = $12`, args...)
		if err != nil || tag.RowsAffected() == 1 {
			return err
		}
		var one int
		err = tx.QueryRow(ctx, `SELECT 1 FROM `+s.t.users+` WHERE name = $1`, u.Name).Scan(&one)
		if errors.Is(err, pgx.ErrNoRows) {
			return idkeeper.ErrNotFound
		}
		if err != nil {
			return err
		}
		return idkeeper.ErrConflict
	})
}

// CountUsers implements account.Store.
func (s *Store) CountUsers(ctx context.Context) (int, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var n int
	err := s.pool.QueryRow(ctx, `SELECT count(*) FROM `+s.t.users).Scan(&n)
	return n, s.wrap("count users", err)
}

const sessionCols = `id, user_name, epoch, created_at, seen_at, expires_at, remote_ip, user_agent`

// CreateSession implements account.Store.
func (s *Store) CreateSession(ctx context.Context, a account.Session) error {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	tag, err := s.pool.Exec(ctx, `INSERT INTO `+s.t.sessions+` (`+sessionCols+`) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
		ON CONFLICT (id) DO NOTHING`, a.ID, a.User, a.Epoch, timeMs(a.CreatedAt), timeMs(a.SeenAt), timeMs(a.ExpiresAt),
		a.RemoteIP, a.UserAgent)
	if err != nil {
		return s.wrap("create session", err)
	}
	if tag.RowsAffected() == 0 {
		return idkeeper.ErrConflict
	}
	return nil
}

// Session implements account.Store.
func (s *Store) Session(ctx context.Context, id string) (account.Session, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var a account.Session
	var created, seen, expires int64
	err := s.pool.QueryRow(ctx, `SELECT `+sessionCols+` FROM `+s.t.sessions+` WHERE id = $1`, id).
		Scan(&a.ID, &a.User, &a.Epoch, &created, &seen, &expires, &a.RemoteIP, &a.UserAgent)
	if errors.Is(err, pgx.ErrNoRows) {
		return account.Session{}, idkeeper.ErrNotFound
	}
	if err != nil {
		return account.Session{}, s.wrap("session", err)
	}
	a.CreatedAt, a.SeenAt, a.ExpiresAt = msTime(created), msTime(seen), msTime(expires)
	return a, nil
}

// TouchSession implements account.Store.
func (s *Store) TouchSession(ctx context.Context, id string, at time.Time) error {
	return s.exec(ctx, "touch session", `UPDATE `+s.t.sessions+` SET seen_at = $2 WHERE id = $1 AND seen_at < $2`, id, timeMs(at))
}

// DeleteSession implements account.Store.
func (s *Store) DeleteSession(ctx context.Context, id string) error {
	return s.exec(ctx, "delete session", `DELETE FROM `+s.t.sessions+` WHERE id = $1`, id)
}

// DeleteUserSessions implements account.Store.
func (s *Store) DeleteUserSessions(ctx context.Context, user string) (int, error) {
	return s.execCount(ctx, "delete user sessions", `DELETE FROM `+s.t.sessions+` WHERE user_name = $1`, user)
}

// PruneSessions implements account.Store.
func (s *Store) PruneSessions(ctx context.Context, now time.Time, idle time.Duration) (int, error) {
	n := timeMs(now)
	return s.execCount(ctx, "prune sessions", `DELETE FROM `+s.t.sessions+` WHERE expires_at <= $1 OR seen_at + $2 <= $1`,
		n, idle.Milliseconds())
}

// exec runs one statement.
func (s *Store) exec(ctx context.Context, op, sql string, args ...any) error {
	_, err := s.execCount(ctx, op, sql, args...)
	return err
}

// execCount runs one statement and returns the rows it touched.
func (s *Store) execCount(ctx context.Context, op, sql string, args ...any) (int, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	tag, err := s.pool.Exec(ctx, sql, args...)
	if err != nil {
		return 0, s.wrap(op, err)
	}
	return int(tag.RowsAffected()), nil
}

// allowKey is the sort key of the masked prefix p: family (0 IPv4, 1 IPv6), the
// 16-byte address (IPv4 in its 4-in-6 form) and the length, so that key order is
// netip's order: by address, then by prefix length.
func allowKey(p netip.Prefix) []byte {
	b := make([]byte, 0, 18)
	fam := byte(1)
	if p.Addr().Is4() {
		fam = 0
	}
	a := p.Addr().As16()
	b = append(append(append(b, fam), a[:]...), byte(p.Bits()))
	return b
}

func allowPrefix(p netip.Prefix) (netip.Prefix, error) {
	if !p.IsValid() {
		return netip.Prefix{}, protocol.Invalidf("prefix", "not an IP prefix")
	}
	return p.Masked(), nil
}

// AddAllowEntry implements account.Store.
func (s *Store) AddAllowEntry(ctx context.Context, e allowlist.Entry) error {
	p, err := allowPrefix(e.Prefix)
	if err != nil {
		return err
	}
	n, err := s.execCount(ctx, "add allow entry", `INSERT INTO `+s.t.allow+` (sort_key, prefix, note, created_by, created_at)
		VALUES ($1, $2, $3, $4, $5) ON CONFLICT (sort_key) DO NOTHING`, allowKey(p), p.String(), e.Note, e.CreatedBy, timeMs(e.CreatedAt))
	if err == nil && n == 0 {
		return idkeeper.ErrConflict
	}
	return err
}

// RemoveAllowEntry implements account.Store.
func (s *Store) RemoveAllowEntry(ctx context.Context, p netip.Prefix) error {
	p, err := allowPrefix(p)
	if err != nil {
		return err
	}
	n, err := s.execCount(ctx, "remove allow entry", `DELETE FROM `+s.t.allow+` WHERE sort_key = $1`, allowKey(p))
	if err == nil && n == 0 {
		return idkeeper.ErrNotFound
	}
	return err
}

// AllowEntries implements account.Store.
func (s *Store) AllowEntries(ctx context.Context) ([]allowlist.Entry, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	rows, _ := s.pool.Query(ctx, `SELECT prefix, note, created_by, created_at FROM `+s.t.allow+` ORDER BY sort_key`)
	out := []allowlist.Entry{}
	var prefix string
	var e allowlist.Entry
	var at int64
	_, err := pgx.ForEachRow(rows, []any{&prefix, &e.Note, &e.CreatedBy, &at}, func() error {
		p, err := netip.ParsePrefix(prefix)
		if err != nil {
			return errors.New("postgres: corrupt allow-list entry " + prefix)
		}
		e.Prefix, e.CreatedAt = p, msTime(at)
		out = append(out, e)
		return nil
	})
	if err != nil {
		return nil, s.wrap("allow entries", err)
	}
	return out, nil
}
