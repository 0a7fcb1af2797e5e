// Package bolt is the idkeeper.Store on a bbolt file: the embedded default store of
// a single registry server and of `idkeeper dev`.
//
// # Guarantees
//
// Every mutating method is one bbolt read-write transaction (LoadSnapshot: bounded
// ones into a staging bucket, then one that swaps it in): it applies entirely or
// not at all, and it is on disk (fsync) before the method returns. bbolt locks the
// file, so one process at a time opens it; within that process every method is safe
// for concurrent use, and write transactions run one at a time. The time authority
// is Options.Clock (the server's clock), read inside each transaction.
//
// # Data model
//
// Buckets, all keys and integers big-endian, all times int64 Unix milliseconds (the
// zero time.Time is stored as its own, negative, Unix millisecond value, so it round
// trips). In index keys a time has its sign bit flipped, so that byte order is time
// order.
//
//	meta        "version" (schema, 2), "generation" (number u64 | at i64 | origin
//	            len u8 | origin | ID; absent: not initialised), "nodes" (pool
//	            size), "first" (the pool's first node ID: the pool is node IDs
//	            first..first+nodes-1; absent: 0), "layout" (the pool's layout,
//	            idkeeper.FormatLayout, written with the pool; absent: a file
//	            written before layouts were, on idkeeper.DefaultLayout), "fence"
//	            (fencing counter), "seq" (free-order counter),
//	            "held" (leases), "quarantined" (entries of the quarantine index),
//	            "cooling" (entries of the cooling index; counted at Open when a
//	            file written before it lacks it)
//	nodes       node u32 → watermark i64 | quarantinedUntil i64 | freeSeq u64 |
//	            place u8 | floor i64 | lastToken u64 | restorable u8 (one record per
//	            node ID, never deleted; place names the one index below that holds
//	            the node: none while held, else ready, cooling or quarantine)
//	leases      node u32 → notBefore i64 | expiresAt i64 | token u64 | grantedAt i64 |
//	            renewedAt i64 | requester key length u16 | requester key | key ID
//	requesters  requester key → node u32 … (sorted)
//	keyheld     key ID → node IDs its leases hold, u64 (absent: none)
//	expiry      expiresAt | node u32 → ∅   (held nodes, by expiry: Reclaim, InGrace)
//	ready       freeSeq u64 | node u32 → ∅   (free, fenced watermark < now when placed)
//	cooling     fenced watermark | freeSeq u64 | node u32 → ∅   (free, fenced watermark ≥ now)
//	quarantine  quarantinedUntil | node u32 → ∅   (free, quarantined when placed)
//	keycool     key ID length u16 | key ID | until i64 | node u32 → lastToken u64
//	            (cooling charges, keycool.go: the node counts against the key's
//	            quota while until ≥ now and its lastToken is still the one the
//	            Remove left; a load drops them all)
//	locks       name → lockedAt i64 | until i64 | owner
//	apikeys     ID → JSON
//	skew        requester key → JSON (with its lapse time)
//	history, history-ended
//	            the lease history (history.go)
//	restore-staging  the state a LoadSnapshot is writing, until it swaps it in
//	            (snapshot.go); nothing else reads it
//
// The admin records (account.Store: users, sessions, usersessions,
// allowlist, audit and meta "audithead") are laid out in adminenc.go; their
// buckets are made by the first write that needs them, as is the alerts bucket
// (alert.StateStore: alert name → its state; alerts.go) and the settings bucket
// (idkeeper.BackupScheduleStore: "backup-schedule" → the schedule;
// backupschedule.go), which no snapshot holds.
//
// The fenced watermark is max(watermark, floor): the floor is what a reset raised.
//
// A free node gets the next free-order sequence number when it is freed, and keeps
// it while it moves between the free indexes. Time moves nodes on by itself (a
// quarantine ends, a watermark passes); such moves are made lazily, at the start of
// Alloc and Reclaim. So Alloc costs O((count + moved) · log n)
// whatever the number of leases, and Counts is O(log n + k) with k the leases in
// grace plus the quarantine and cooling entries that time has moved on but that
// have not been moved yet.
package bolt

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	bbolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/protocol"
)

// DefaultTimeout is how long Open waits for the file lock when Options.Timeout is
// zero.
const DefaultTimeout = 5 * time.Second

// ErrLocked is wrapped by the error of Open when another process holds the file.
var ErrLocked = errors.New("bolt: the database file is locked by another process")

// schemaVersion is the layout described in the package doc. Version 1 (before
// generations, owners and floors) is not read: the file must be started anew.
const schemaVersion = 2

// Options configure Open. The zero value is usable.
type Options struct {
	// Clock is the time authority; nil means time.Now.
	Clock idkeeper.Clock
	// Timeout is how long Open waits for another process to release the file lock;
	// zero means DefaultTimeout, a negative value waits forever.
	Timeout time.Duration
	// Logger receives store events (a new pool, a reset); nil means slog.Default().
	Logger *slog.Logger
	// MustExist makes Open fail, creating nothing, when no file is at path: the
	// error wraps fs.ErrNotExist. Without it Open creates the file (not its folder).
	MustExist bool
}

// Store is the bbolt idkeeper.Store. Create it with Open.
type Store struct {
	db    *bbolt.DB
	path  string // absolute and cleaned
	clock idkeeper.Clock
	log   *slog.Logger
	// loadMu lets one LoadSnapshot at a time use the staging bucket.
	loadMu sync.Mutex
	// loadBatch, when not zero, replaces snapshotBatch (tests set it lower).
	loadBatch int
}

var _ idkeeper.IdentifiedStore = (*Store)(nil)

// Identity is "bolt:" and the file's absolute, cleaned path
// (idkeeper.IdentifiedStore).
func (s *Store) Identity() string { return "bolt:" + s.path }

var (
	bucketMeta       = []byte("meta")
	bucketNodes      = []byte("nodes")
	bucketLeases     = []byte("leases")
	bucketRequesters = []byte("requesters")
	bucketKeyHeld    = []byte("keyheld")
	bucketExpiry     = []byte("expiry")
	bucketReady      = []byte("ready")
	bucketCooling    = []byte("cooling")
	bucketQuarantine = []byte("quarantine")
	bucketLocks      = []byte("locks")
	bucketAPIKeys    = []byte("apikeys")
	bucketSkew       = []byte("skew")
	bucketKeyCool    = []byte("keycool")

	allBuckets = [][]byte{bucketMeta, bucketNodes, bucketLeases, bucketRequesters, bucketKeyHeld, bucketExpiry,
		bucketReady, bucketCooling, bucketQuarantine, bucketLocks, bucketAPIKeys, bucketSkew, bucketHistory, bucketHistoryEnded,
		bucketKeyCool}

	keyVersion     = []byte("version")
	keyGeneration  = []byte("generation")
	keyNodes       = []byte("nodes")
	keyFirst       = []byte("first")  // the pool's first node ID (absent: 0)
	keyLayout      = []byte("layout") // the pool's layout, idkeeper.FormatLayout (absent: the default)
	keyFence       = []byte("fence")
	keySeq         = []byte("seq")
	keyHeld        = []byte("held")
	keyQuarantined = []byte("quarantined")
	keyCooling     = []byte("cooling")
)

// Open opens or creates (unless opts.MustExist) the store file at path. It waits up to opts.Timeout for the
// file lock and returns an error wrapping ErrLocked when another process keeps it.
func Open(path string, opts Options) (*Store, error) {
	db, err := openFile(path, opts)
	if err != nil {
		return nil, err
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("bolt: open %s: %w", path, err)
	}
	s := &Store{db: db, path: abs, clock: opts.clock(), log: opts.Logger}
	if s.log == nil {
		s.log = slog.Default()
	}
	if err := db.Update(createBuckets); err != nil {
		db.Close()
		return nil, fmt.Errorf("bolt: open %s: %w", path, err)
	}

	return s, nil
}

// openFile opens or creates the bbolt file at path, mode 0600. It waits up to
// opts.Timeout for the file lock (DefaultTimeout when zero, forever when negative)
// and returns an error wrapping ErrLocked when another process keeps it.
func openFile(path string, opts Options) (*bbolt.DB, error) {
	timeout := opts.Timeout
	switch {
	case timeout == 0:
		timeout = DefaultTimeout
	case timeout < 0:
		timeout = 0 // bbolt waits forever
	}
	bo := &bbolt.Options{Timeout: timeout}
	if opts.MustExist {
		// Without O_CREATE the open itself refuses a missing file: no stat that a
		// file created meanwhile could race.
		bo.OpenFile = func(name string, flag int, perm os.FileMode) (*os.File, error) {
			return os.OpenFile(name, flag&^os.O_CREATE, perm)
		}
	}
	db, err := bbolt.Open(path, 0o600, bo)
	if errors.Is(err, berrors.ErrTimeout) {
		return nil, fmt.Errorf("%w: %s (waited %s): %w", ErrLocked, path, timeout, err)
	}
	if err != nil {
		return nil, fmt.Errorf("bolt: open %s: %w", path, err)
	}
	return db, nil
}

// clock is opts.Clock, or time.Now when it is nil.
func (opts Options) clock() idkeeper.Clock {
	if opts.Clock == nil {
		return time.Now
	}
	return opts.Clock
}

func createBuckets(tx *bbolt.Tx) error {
	for _, name := range allBuckets {
		if _, err := tx.CreateBucketIfNotExists(name); err != nil {
			return err
		}
	}
	meta := tx.Bucket(bucketMeta)
	if v := meta.Get(keyVersion); v != nil {
		if got := getU64(v); got != schemaVersion {
			return fmt.Errorf("the file has schema version %d, this build reads only version %d: it was written "+
				"by an older development build, which no release reads; start on a new file (and run `idkeeper init`)",
				got, schemaVersion)
		}
		if meta.Get(keyCooling) == nil {
			// A file from before the cooling counter: count the index once.
			return meta.Put(keyCooling, putU64(uint64(tx.Bucket(bucketCooling).Stats().KeyN)))
		}
		return nil
	}
	if err := meta.Put(keyCooling, putU64(0)); err != nil {
		return err
	}
	return meta.Put(keyVersion, putU64(schemaVersion))
}

// Close closes the file. Calls after Close return an error.
func (s *Store) Close() error { return s.db.Close() }

// Ping reports whether the file is open.
func (s *Store) Ping(ctx context.Context) error {
	return s.view(ctx, func(*txn) error { return nil })
}

// Now is the store's clock truncated to the millisecond.
func (s *Store) Now(context.Context) (time.Time, error) { return protocol.Millis(s.clock()), nil }

// counters are the meta counters a transaction reads at its start and update writes
// back when they changed.
type counters struct {
	nodeCount      uint64 // pool size
	first          uint64 // the pool's first node ID
	fence          uint64 // fencing counter
	seq            uint64 // free-order counter
	held           uint64 // leases
	quarantineSize uint64 // entries of the quarantine index
	coolingSize    uint64 // entries of the cooling index
}

// txn is one transaction with its buckets, its instant and the meta counters.
type txn struct {
	tx                                *bbolt.Tx
	now                               int64 // Unix ms
	meta, nodes, leases, reqs, expiry *bbolt.Bucket
	ready, cooling, quar, keyHeld     *bbolt.Bucket
	keyCool                           *bbolt.Bucket // cooling charges (keycool.go)
	hist, histEnded                   *bbolt.Bucket // the lease history (history.go)
	counters
	loaded counters
}

func (s *Store) begin(tx *bbolt.Tx) *txn {
	return newTxn(tx, tx.Bucket, protocol.Millis(s.clock()).UnixMilli())
}

// newTxn is a transaction on the buckets that bucket returns by name: the
// top-level ones (begin), or the children of a load's staging bucket.
func newTxn(tx *bbolt.Tx, bucket func(name []byte) *bbolt.Bucket, now int64) *txn {
	t := &txn{
		tx: tx, now: now,
		meta: bucket(bucketMeta), nodes: bucket(bucketNodes), leases: bucket(bucketLeases),
		reqs: bucket(bucketRequesters), expiry: bucket(bucketExpiry), ready: bucket(bucketReady),
		cooling: bucket(bucketCooling), quar: bucket(bucketQuarantine), keyHeld: bucket(bucketKeyHeld),
		keyCool: bucket(bucketKeyCool),
		hist:    bucket(bucketHistory), histEnded: bucket(bucketHistoryEnded),
	}
	t.nodeCount = getU64(t.meta.Get(keyNodes))
	t.first = getU64(t.meta.Get(keyFirst))
	t.fence = getU64(t.meta.Get(keyFence))
	t.seq = getU64(t.meta.Get(keySeq))
	t.held = getU64(t.meta.Get(keyHeld))
	t.quarantineSize = getU64(t.meta.Get(keyQuarantined))
	t.coolingSize = getU64(t.meta.Get(keyCooling))
	t.loaded = t.counters
	return t
}

func (t *txn) flush() error {
	if t.counters == t.loaded {
		return nil
	}
	return t.putCounters()
}

// putCounters writes every meta counter.
func (t *txn) putCounters() error {
	for _, kv := range []struct {
		k []byte
		v uint64
	}{{keyNodes, t.nodeCount}, {keyFirst, t.first}, {keyFence, t.fence}, {keySeq, t.seq}, {keyHeld, t.held}, {keyQuarantined, t.quarantineSize},
		{keyCooling, t.coolingSize}} {
		if err := t.meta.Put(kv.k, putU64(kv.v)); err != nil {
			return err
		}
	}
	return nil
}

// update runs fn in one read-write transaction. A guard, when not nil, is checked
// first: when it fails nothing is written.
func (s *Store) update(ctx context.Context, g *idkeeper.Guard, fn func(*txn) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return wrap(s.db.Update(func(tx *bbolt.Tx) error {
		t := s.begin(tx)
		if g != nil {
			gen, _, err := t.generation()
			if err != nil {
				return err
			}
			if err := g.Check(gen.ID, t.fence, msTime(t.now)); err != nil {
				return err
			}
		}
		if err := fn(t); err != nil {
			return err
		}
		return t.flush()
	}))
}

// view runs fn in one read-only transaction.
func (s *Store) view(ctx context.Context, fn func(*txn) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return wrap(s.db.View(func(tx *bbolt.Tx) error { return fn(s.begin(tx)) }))
}

// wrap marks failures of bbolt itself; contract errors pass unchanged.
func wrap(err error) error {
	var de *idkeeper.Error
	if err == nil || errors.As(err, &de) || errors.Is(err, idkeeper.ErrStoreReset) || errors.Is(err, idkeeper.ErrStoreClockSkew) {
		return err
	}
	return fmt.Errorf("bolt: %w", err)
}
