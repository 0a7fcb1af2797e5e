package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// SchemaVersion is the version of the tables this package reads and writes.
//
// Upgrade path: a change of the tables gets the next version and a step in
// migrations, from the version before to it, run by InitSchema (`idkeeper init`)
// in one transaction with the version row, under the schema's lock: a schema of
// version v is brought to SchemaVersion by the steps v+1 … SchemaVersion, and
// replicas of the older release, which refuse a newer schema (CheckSchema), are
// stopped first. There is one version so far, so no step.
const SchemaVersion = 1

// tables are the qualified, quoted names of the store's tables.
type tables struct {
	version, locks, apiKeys, skew          string
	users, sessions, allow, audit, auditHd string
	alerts, settings, idem                 string
	meta, nodes, charges, history          string
}

func tablesIn(schema string) tables {
	q := func(name string) string { return pgx.Identifier{schema, name}.Sanitize() }
	return tables{version: q("schema_version"), locks: q("locks"), apiKeys: q("api_keys"), skew: q("skew"),
		users: q("users"), sessions: q("sessions"), allow: q("allow_list"), audit: q("audit"),
		auditHd: q("audit_head"), alerts: q("alerts"), settings: q("settings"), idem: q("idempotency"),
		meta: q("meta"), nodes: q("nodes"), charges: q("charges"), history: q("history")}
}

// ddl creates the tables of version 1. Times are Unix milliseconds (bigint), Go's
// zero time.Time included (a negative value); durations are nanoseconds.
func (t tables) ddl() []string {
	return []string{
		`CREATE TABLE ` + t.version + ` (one boolean PRIMARY KEY DEFAULT true CHECK (one), version integer NOT NULL)`,
		`CREATE TABLE ` + t.locks + ` (name text PRIMARY KEY, owner text NOT NULL, locked_at bigint NOT NULL,
			until bigint NOT NULL)`,
		`CREATE TABLE ` + t.apiKeys + ` (id text PRIMARY KEY, hash bytea NOT NULL, description text NOT NULL,
			created_at bigint NOT NULL, created_by text NOT NULL, expires_at bigint NOT NULL, max_nodes integer NOT NULL,
			bootstrap boolean NOT NULL, admin boolean NOT NULL, revoked_at bigint NOT NULL, last_used_at bigint NOT NULL)`,
		`CREATE TABLE ` + t.skew + ` (requester text PRIMARY KEY, skew bigint NOT NULL, threshold bigint NOT NULL,
			level text NOT NULL, observed_at bigint NOT NULL, remote_ip text NOT NULL, operation text NOT NULL,
			lapse bigint NOT NULL)`,
		`CREATE INDEX ON ` + t.skew + ` (lapse)`,
		`CREATE TABLE ` + t.users + ` (name text PRIMARY KEY, role text NOT NULL, password_hash text NOT NULL,
			disabled boolean NOT NULL, created_at bigint NOT NULL, created_by text NOT NULL, epoch bigint NOT NULL,
			password_changed_at bigint NOT NULL, last_login_at bigint NOT NULL, webhook text NOT NULL,
			version bigint NOT NULL)`,
		`CREATE TABLE ` + t.sessions + ` (id text PRIMARY KEY, user_name text NOT NULL, epoch bigint NOT NULL,
			created_at bigint NOT NULL, seen_at bigint NOT NULL, expires_at bigint NOT NULL, remote_ip text NOT NULL,
			user_agent text NOT NULL)`,
		`CREATE INDEX ON ` + t.sessions + ` (user_name)`,
		`CREATE TABLE ` + t.allow + ` (sort_key bytea PRIMARY KEY, prefix text NOT NULL, note text NOT NULL,
			created_by text NOT NULL, created_at bigint NOT NULL)`,
		`CREATE TABLE ` + t.audit + ` (seq bigint PRIMARY KEY, at bigint NOT NULL, actor text NOT NULL,
			action text NOT NULL, target text NOT NULL, remote_ip text NOT NULL, detail text NOT NULL, prev text NOT NULL,
			hash text NOT NULL)`,
		`CREATE TABLE ` + t.auditHd + ` (one boolean PRIMARY KEY DEFAULT true CHECK (one), seq bigint NOT NULL,
			hash text NOT NULL)`,
		`CREATE TABLE ` + t.alerts + ` (name text PRIMARY KEY, firing boolean NOT NULL, since bigint NOT NULL,
			last_sent bigint NOT NULL, checked bigint NOT NULL, summary text NOT NULL, version bigint NOT NULL)`,
		`CREATE TABLE ` + t.settings + ` (name text PRIMARY KEY, value text NOT NULL, updated_by text NOT NULL,
			updated_at bigint NOT NULL, version bigint NOT NULL)`,
		`CREATE TABLE ` + t.idem + ` (scope text PRIMARY KEY, owner text NOT NULL, fingerprint text NOT NULL,
			token text NOT NULL, state smallint NOT NULL, outcome integer NOT NULL, metadata bytea, body bytea,
			created_at bigint NOT NULL, locked_until bigint NOT NULL, expires_at bigint NOT NULL, size bigint NOT NULL)`,
		`CREATE INDEX ON ` + t.idem + ` (expires_at)`,
		`CREATE INDEX ON ` + t.idem + ` (owner, expires_at)`,
		`CREATE TABLE ` + t.meta + ` (one boolean PRIMARY KEY DEFAULT true CHECK (one), gen_id text NOT NULL,
			gen_number bigint NOT NULL, gen_origin text NOT NULL, gen_at bigint NOT NULL, fence bigint NOT NULL,
			first bigint NOT NULL, nodes bigint NOT NULL, layout text NOT NULL, free_seq bigint NOT NULL,
			held bigint NOT NULL, quarantined bigint NOT NULL)`,
		`CREATE TABLE ` + t.nodes + ` (id bigint PRIMARY KEY, place smallint NOT NULL, free_seq bigint NOT NULL,
			watermark bigint NOT NULL, quar_until bigint NOT NULL, floor bigint NOT NULL, last_token bigint NOT NULL,
			restorable boolean NOT NULL, not_before bigint, expires_at bigint, granted_at bigint, renewed_at bigint,
			token bigint, requester text, key_id text)`,
		`CREATE INDEX ON ` + t.nodes + ` (free_seq) WHERE place = 1`,
		`CREATE INDEX ON ` + t.nodes + ` (greatest(watermark, floor), free_seq) WHERE place = 2`,
		`CREATE INDEX ON ` + t.nodes + ` (quar_until) WHERE place = 3`,
		`CREATE INDEX ON ` + t.nodes + ` (expires_at, id) WHERE place = 0`,
		`CREATE INDEX ON ` + t.nodes + ` (requester) WHERE place = 0`,
		`CREATE INDEX ON ` + t.nodes + ` (key_id) WHERE place = 0`,
		`CREATE TABLE ` + t.charges + ` (key_id text NOT NULL, ord integer NOT NULL, node bigint NOT NULL,
			until bigint NOT NULL, token bigint NOT NULL, PRIMARY KEY (key_id, ord))`,
		`CREATE TABLE ` + t.history + ` (node bigint NOT NULL, token bigint NOT NULL, rec bytea NOT NULL,
			ended_at bigint, PRIMARY KEY (node, token))`,
		`CREATE INDEX ON ` + t.history + ` (ended_at, node, token) WHERE ended_at IS NOT NULL`,
	}
}

// migrations[v] brings a schema of version v to v+1; none so far.
var migrations = map[int][]string{}

// ErrSchemaNewer is returned by CheckSchema and InitSchema for a schema written by
// a newer IdKeeper.
var ErrSchemaNewer = errors.New("postgres: the schema is newer than this IdKeeper")

// CheckSchema returns the version of the store's schema, 0 when the schema holds
// no store (not initialised: InitSchema, `idkeeper init`), and an error wrapping
// ErrSchemaNewer for a version newer than SchemaVersion.
func (s *Store) CheckSchema(ctx context.Context) (int, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	v, err := s.schemaVersion(ctx, s.pool)
	if err != nil {
		return 0, s.wrap("schema version", err)
	}
	return v, s.newer(v)
}

func (s *Store) newer(v int) error {
	if v > SchemaVersion {
		return fmt.Errorf("%w: schema %s is version %d, this IdKeeper knows up to %d: run the newer release, "+
			"or restore a backup into a new schema", ErrSchemaNewer, s.schema, v, SchemaVersion)
	}
	return nil
}

func (s *Store) schemaVersion(ctx context.Context, q querier) (int, error) {
	// to_regclass is NULL for a missing table (or schema) where a SELECT from it
	// would abort the transaction.
	var exists bool
	if err := q.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, s.t.version).Scan(&exists); err != nil || !exists {
		return 0, err
	}
	var v int
	err := q.QueryRow(ctx, `SELECT version FROM `+s.t.version).Scan(&v)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	return v, err
}

// InitSchema creates the schema and the store's tables at SchemaVersion, or
// brings an older schema to it (SchemaVersion's upgrade path), in one
// transaction under an advisory lock of the schema, so that concurrent inits
// take turns; a schema at SchemaVersion is left alone. A newer schema is refused
// (ErrSchemaNewer) and nothing changes.
func (s *Store) InitSchema(ctx context.Context) error {
	return s.inTx(ctx, "init schema", func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`, "idkeeper schema "+s.schema); err != nil {
			return err
		}
		v, err := s.schemaVersion(ctx, tx)
		if err != nil {
			return err
		}
		if err := s.newer(v); err != nil || v == SchemaVersion {
			return err
		}
		var stmts []string
		if v == 0 {
			stmts = append([]string{`CREATE SCHEMA IF NOT EXISTS ` + pgx.Identifier{s.schema}.Sanitize()}, s.t.ddl()...)
			stmts = append(stmts, `INSERT INTO `+s.t.version+` (version) VALUES (1)`,
				`INSERT INTO `+s.t.auditHd+` (seq, hash) VALUES (0, '')`,
				`INSERT INTO `+s.t.meta+` (gen_id, gen_number, gen_origin, gen_at, fence, first, nodes, layout, free_seq,
					held, quarantined) VALUES ('', 0, '', 0, 0, 0, 0, '', 0, 0, 0)`)
			v = 1
		}
		for ; v < SchemaVersion; v++ {
			stmts = append(stmts, migrations[v]...)
			stmts = append(stmts, fmt.Sprintf(`UPDATE %s SET version = %d`, s.t.version, v+1))
		}
		for _, q := range stmts {
			if _, err := tx.Exec(ctx, q); err != nil {
				return fmt.Errorf("postgres: init schema %s: %w", s.schema, err)
			}
		}
		s.log.Info("postgres: schema ready", "schema", s.schema, "version", SchemaVersion)
		return nil
	})
}
