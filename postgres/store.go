package postgres

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/idempotency"
	"github.com/idkeeper/idkeeper/internal/leasetx"
	"github.com/idkeeper/idkeeper/protocol"
)

// DefaultTimeout bounds each call when Options.Timeout is zero.
const DefaultTimeout = 30 * time.Second

// maxAttempts bounds the attempts of one transaction that PostgreSQL aborted
// for a serialization failure or a deadlock.
const maxAttempts = 50

// Options configure a Store. The zero value is usable.
type Options struct {
	// Clock, when set, replaces PostgreSQL's clock (clock_timestamp()) as the
	// time authority: for tests.
	Clock idkeeper.Clock
	// Schema holds the store's tables; default DefaultSchema (Open: the URL's).
	Schema string
	// Logger receives store events. Nil means slog.Default().
	Logger *slog.Logger
	// Timeout bounds each call, retries included, on top of the caller's context.
	// Zero means DefaultTimeout; negative means no bound of the store's own.
	Timeout time.Duration
	// AcceptLostWrites lets Open go on when the server may lose acknowledged
	// writes on a crash (fsync or synchronous_commit off: Durability.Check).
	AcceptLostWrites bool
	// DeferDurability makes Open leave the durability to its caller: it neither
	// refuses nor warns about fsync or synchronous_commit off (the caller asks
	// Durability, as the server does at start with its --accept-lost-writes).
	DeferDurability bool
	// ClosePool makes Close close the pool too; by default the pool stays the
	// caller's (Open sets it).
	ClosePool bool
}

// Store is the idkeeper store on PostgreSQL. It is safe for concurrent use, and
// any number of Stores, in any number of processes, may share one database and
// schema.
type Store struct {
	pool      *pgxpool.Pool
	schema    string
	t         tables
	clock     idkeeper.Clock
	log       *slog.Logger
	timeout   time.Duration
	closePool bool
	loadBatch int // records a snapshot load copies in at a time
	comb      combiner
}

// New returns a Store on pool, in opts.Schema. It does no I/O: call
// CheckDurability and CheckSchema (Open does), or InitSchema.
func New(pool *pgxpool.Pool, opts Options) (*Store, error) {
	if pool == nil {
		return nil, errors.New("postgres: New needs a pool")
	}
	schema := opts.Schema
	if schema == "" {
		schema = DefaultSchema
	}
	if !schemaName.MatchString(schema) {
		return nil, fmt.Errorf("postgres: schema %q: lower-case letters, digits and _, not starting with a digit, at most 63 bytes", schema)
	}
	s := &Store{pool: pool, schema: schema, t: tablesIn(schema), clock: opts.Clock, log: opts.Logger,
		timeout: opts.Timeout, closePool: opts.ClosePool, loadBatch: copyBatch}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.timeout == 0 {
		s.timeout = DefaultTimeout
	}
	return s, nil
}

// ErrUnreachable is the error of an Open whose first ping got no answer: no
// server at the address, or none that took the connection.
var ErrUnreachable = errors.New("postgres: no answer")

// Open connects to the database of url (ParseURL), checks the server's
// durability (CheckDurability: refused unless opts.AcceptLostWrites or
// opts.DeferDurability; a standby is refused always) and the
// schema's version (CheckSchema: a newer one is refused), and returns the store,
// which closes its pool on Close. Options.Schema, when empty, is the URL's.
func Open(ctx context.Context, url string, opts Options) (*Store, error) {
	cfg, err := ParseURL(url)
	if err != nil {
		return nil, err
	}
	if opts.Schema == "" {
		opts.Schema = cfg.Schema
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg.Pool)
	if err != nil {
		return nil, fmt.Errorf("postgres: %s", redact(err.Error(), cfg.Pool.ConnConfig.Password))
	}
	opts.ClosePool = true
	s, err := New(pool, opts)
	if err != nil {
		pool.Close()
		return nil, err
	}
	if err = s.Ping(ctx); err != nil {
		err = fmt.Errorf("%w: %w", ErrUnreachable, err)
	}
	var d Durability
	if err == nil {
		d, err = s.CheckDurability(ctx)
	}
	if err == nil && d.InRecovery {
		err = errors.New("postgres: the server is a standby, which takes no writes: name the primary, or list " +
			"every host with target_session_attrs=read-write")
	}
	if err == nil && !opts.DeferDurability {
		if err = d.Check(); err != nil && opts.AcceptLostWrites {
			s.log.Warn("postgres: the server may lose acknowledged writes; accepted", "durability", d.String())
			err = nil
		}
	}
	if err == nil {
		_, err = s.CheckSchema(ctx)
	}
	if err != nil {
		pool.Close()
		return nil, err
	}
	return s, nil
}

var _ idkeeper.LockStore = (*Store)(nil)
var _ idkeeper.KeyStore = (*Store)(nil)
var _ idkeeper.SkewStore = (*Store)(nil)

// Identity names the servers, the database and the schema, without credentials
// or TLS settings: "postgres://HOST:PORT[,HOST:PORT…]/DATABASE schema SCHEMA",
// the hosts of the URL sorted.
func (s *Store) Identity() string {
	c := s.pool.Config().ConnConfig
	hosts := []string{net.JoinHostPort(c.Host, strconv.Itoa(int(c.Port)))}
	for _, f := range c.Fallbacks {
		hosts = append(hosts, net.JoinHostPort(f.Host, strconv.Itoa(int(f.Port))))
	}
	slices.Sort(hosts)
	return fmt.Sprintf("postgres://%s/%s schema %s", strings.Join(slices.Compact(hosts), ","), c.Database, s.schema)
}

// Schema is the schema that holds the store's tables.
func (s *Store) Schema() string { return s.schema }

// Ping checks that the server answers.
func (s *Store) Ping(ctx context.Context) error {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	return s.wrap("ping", s.pool.Ping(ctx))
}

// Close closes the pool when the Store owns it (Options.ClosePool).
func (s *Store) Close() error {
	if s.closePool {
		s.pool.Close()
	}
	return nil
}

// Now is the store's clock: PostgreSQL's clock_timestamp() (or Options.Clock),
// truncated to the millisecond.
func (s *Store) Now(ctx context.Context) (time.Time, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	ms, err := s.nowMs(ctx, s.pool)
	if err != nil {
		return time.Time{}, s.wrap("now", err)
	}
	return msTime(ms), nil
}

// querier is a pool, a connection or a transaction.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// nowMs is the store's now in Unix milliseconds, read through q (inside a
// transaction: at that point of it).
func (s *Store) nowMs(ctx context.Context, q querier) (int64, error) {
	if s.clock != nil {
		return protocol.Millis(s.clock()).UnixMilli(), nil
	}
	var ms int64
	err := q.QueryRow(ctx, `SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint`).Scan(&ms)
	return ms, err
}

// inTx runs fn in one transaction at READ COMMITTED and commits it; fn's error
// rolls it back and is returned. When PostgreSQL aborts the transaction for a
// serialization failure or a deadlock (SQLSTATE 40001, 40P01), it runs again from
// the start, at most maxAttempts times, with a short random back-off after the
// second; fn must therefore decide on what it reads in its own run only.
func (s *Store) inTx(ctx context.Context, op string, fn func(tx pgx.Tx) error) error {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	for n := 1; ; n++ {
		err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, fn)
		if err == nil || !retryable(err) {
			return s.wrap(op, err)
		}
		if n >= maxAttempts {
			return fmt.Errorf("postgres: %s: %d attempts in a row aborted by the server: %w", op, n, err)
		}
		if err := leasetx.Backoff(ctx, n); err != nil {
			return s.wrap(op, err)
		}
	}
}

// retryable reports a serialization failure or a deadlock.
func retryable(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "40001" || pe.Code == "40P01")
}

// bound applies Options.Timeout to ctx.
func (s *Store) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if s.timeout < 0 {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, s.timeout)
}

// wrap marks failures of PostgreSQL with the operation; contract errors pass
// unchanged. A table that does not exist means a schema never initialised.
func (s *Store) wrap(op string, err error) error {
	var de *idkeeper.Error
	var pe *pgconn.PgError
	var ce *idempotency.CapError
	switch {
	case err == nil || errors.As(err, &de) || errors.As(err, &ce) || errors.Is(err, idkeeper.ErrNotFound) ||
		errors.Is(err, idkeeper.ErrConflict) || errors.Is(err, idkeeper.ErrStoreReset) ||
		errors.Is(err, idkeeper.ErrStoreClockSkew) || errors.Is(err, idempotency.ErrMarkerLost) ||
		strings.HasPrefix(err.Error(), "postgres: "):
		return err
	case errors.As(err, &pe) && (pe.Code == "42P01" || pe.Code == "3F000"):
		return fmt.Errorf("postgres: %s: the schema %s holds no store (run idkeeper init): %w", op, s.schema, err)
	}
	return fmt.Errorf("postgres: %s: %w", op, err)
}

func msTime(ms int64) time.Time { return time.UnixMilli(ms).UTC() }
func timeMs(t time.Time) int64  { return protocol.Millis(t).UnixMilli() }
