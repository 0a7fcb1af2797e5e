// Package postgres is the IdKeeper store on PostgreSQL (issue #32), through
// github.com/jackc/pgx/v5 and its pool: for teams that run PostgreSQL already,
// and, with a synchronous standby, a failover that loses no acknowledged grant.
//
// It is the whole idkeeper.Store (`--store postgres://…`, server.OpenStore):
// the lease pool, its history and snapshots (snapshot.Store), job locks, API
// keys and clock-skew observations, the admin records (account.Store:
// accounts, sessions, the allow-list, the audit chain), the alert state, the
// backup schedule and the gateway's idempotency records (idempotency.Store,
// idempotency.CountingStore). The lease steps are the rules of
// internal/leasetx (issue #31) over this package's leasetx.Tx (rules.go), not a
// copy of them.
//
// # Transactions and isolation
//
// Every guarded step is one transaction at READ COMMITTED, PostgreSQL's default,
// and its decisions rest on row locks, not on the snapshot: a step that reads
// before it writes either writes in one statement whose WHERE re-checks the
// condition on the row as it is when the statement gets its lock (an insert that
// does nothing on a conflict, an upsert that replaces only a lapsed lock or
// idempotency record, an update conditioned on the stored Version, the audit
// head moved only from the Seq and Hash the new entry extends), or it locks the
// rows first (SELECT … FOR UPDATE; a capped idempotency Begin also takes an
// advisory lock of its owner, pg_advisory_xact_lock, so that the count of the
// owner's live records and the insert are one step for all Begins of that
// owner). A competing writer therefore waits for the row, then sees the
// committed row, instead of failing: READ COMMITTED re-reads a locked row at its
// newest version, where REPEATABLE READ and SERIALIZABLE would abort the
// transaction with a serialization failure and make every contended step start
// over. The lease steps take the same approach: every lease transaction first
// locks the meta row (generation, fencing counter, pool, counters: txn.go),
// which serialises them as etcd's meta key does, and then reads, at READ
// COMMITTED, everything the lock holders before it committed. Serialised
// transactions commit one at a time, each waiting for its own WAL flush:
// BenchmarkMetaRowCommit measures that ceiling (450 to 850 transactions a
// second with fsync, 64 callers, on the loaded 2-core test machine), so the
// Alloc, Renew, Remove and RevokeLease steps of concurrent callers run in one
// transaction, a savepoint each, as bbolt's Batch does (combine.go): a step
// that fails rolls back to its savepoint alone. BenchmarkFleetAlloc, 4,000
// processes allocating at once through 64 callers, grants about 2,000 node IDs
// a second with fsync. Each round trip inside a step counts (about 0.1 ms): the
// rows a step reads come in one statement where the rules say which
// (ReadAhead, Scan), and the requester index and a key's count are the lease
// rows' own partial indexes, so a grant writes one node row and one history
// row. Reads (Status, Counts, Leases, Node, ReadSnapshot) run in one read-only
// REPEATABLE READ transaction: one consistent view, never aborted.
//
// A transaction that PostgreSQL aborts anyway, for a serialization failure or a
// deadlock (SQLSTATE 40001, 40P01), runs again from the start, with fresh reads
// and a fresh now, up to 50 times, with a short random back-off after the
// second attempt, within the call's context and Options.Timeout. Any other
// error rolls the transaction back and is returned.
//
// # Time
//
// The time authority is PostgreSQL's clock (clock_timestamp()), as Redis TIME is
// on Redis: one clock for every replica on the store, read inside the
// transaction that decides on it, truncated to the millisecond. Options.Clock
// replaces it, for tests. With several replicas, the clock agent rule is that of
// the other shared stores (DESIGN §8): each replica proves its clock and the
// store's against the TCKCLK 2 agent.
//
// # Schema
//
// The tables live in one schema (URL option schema, default idkeeper), so that
// several stores can share a database. InitSchema (`idkeeper init`) creates
// them, with schema_version, one row holding SchemaVersion; Open refuses a
// schema of a newer version (ErrSchemaNewer), and InitSchema brings an older
// one up (see SchemaVersion for the upgrade path). Times are bigint Unix
// milliseconds, durations nanoseconds:
//
//	schema_version  version
//	locks           name, owner, locked_at, until
//	api_keys        id, hash, description, created_at, created_by, expires_at, max_nodes,
//	                bootstrap, admin, revoked_at, last_used_at
//	skew            requester (key), skew, threshold, level, observed_at, remote_ip, operation,
//	                lapse (indexed: SkewObservations deletes the lapsed ones)
//	users           name, role, password_hash, disabled, created_at, created_by, epoch,
//	                password_changed_at, last_login_at, webhook, version
//	sessions        id, user_name (indexed), epoch, created_at, seen_at, expires_at, remote_ip,
//	                user_agent
//	allow_list      sort_key (family | 16-byte address | length: address order, then length),
//	                prefix, note, created_by, created_at
//	audit           seq, at, actor, action, target, remote_ip, detail, prev, hash
//	audit_head      seq, hash: the last entry ever appended, kept when pruned
//	alerts          name, firing, since, last_sent, checked, summary, version
//	settings        name ("backup-schedule"), value, updated_by, updated_at, version
//	idempotency     scope, owner, fingerprint, token, state, outcome, metadata (JSON), body,
//	                created_at, locked_until, expires_at, size; indexed by expires_at and by
//	                (owner, expires_at)
//	meta            gen_id, gen_number, gen_origin, gen_at, fence, first, nodes, layout,
//	                free_seq, held, quarantined: one row, the lease steps' lock
//	nodes           id, place, free_seq, watermark, quar_until, floor, last_token, restorable,
//	                and the lease while held (not_before, expires_at, granted_at, renewed_at,
//	                token, requester, key_id); partial indexes: ready, cooling, quarantine,
//	                expiry, requester, key
//	charges         key_id, ord, node, until, token (the cooling charges)
//	history         node, token, rec (JSON), ended_at (indexed: PruneHistory)
//
// Nothing is deleted by the store by itself: run PruneSessions, PruneAudit and
// Purge (idempotency) now and then, as on bolt and etcd.
//
// # Durability
//
// Open reads fsync, synchronous_commit (as the store's sessions have it) and
// synchronous_standby_names, and how many standbys stream, synchronously or
// not (CheckDurability). fsync off, or synchronous_commit off, may lose
// acknowledged writes in a crash of the server: Open refuses that unless
// Options.AcceptLostWrites (Durability.Check). With a synchronous standby
// (synchronous_standby_names set, synchronous_commit on, remote_write or
// remote_apply, and the standby streaming) an acknowledged commit is on the
// standby too, so a failover to it loses nothing (Durability.OnStandby); with
// asynchronous standbys only, a promoted standby may lack the last grants, which
// the registry detects as a store reset (the generation and fencing checks of
// DESIGN §7) — Durability.String says which, for /readyz and the admin store
// page.
package postgres
