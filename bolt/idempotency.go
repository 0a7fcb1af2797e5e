package bolt

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	bbolt "go.etcd.io/bbolt"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/idempotency"
	"github.com/idkeeper/idkeeper/protocol"
)

// IdempotencyStore is the idempotency.Store on a bbolt file: for a single
// process (one gateway, or `idkeeper dev`), since bbolt lets one process at a time
// open a file. Processes that share work need the redis store instead.
//
// Records live in buckets of their own, created on first use, so the file may be
// a dedicated one (OpenIdempotency) or the registry's (Store.Idempotency):
//
//	idempotency          scope → JSON record (times in Unix ms)
//	idempotency-expiry   expiresAt (sign bit flipped) | scope → ∅
//	idempotency-owners   len(owner) (2 bytes) | owner | expiresAt | scope → ∅
//	idempotency-counts   "o" owner → records, bytes (8 bytes each); "t" → the same for all owners
//
// Every method is one read-write transaction, on disk before it returns, and
// reads the clock inside it. Lapsed records are deleted lazily: every Begin
// deletes up to purgeBatch of them, oldest first, and Purge deletes them all.
//
// A record counts against its owner (see Owned) in the owners index and the
// counts, which every change keeps in step in its transaction; the cap check of
// Begin is therefore exact and atomic. A record's bytes are its key and its JSON.
// Records written before records were counted (format 1, no "v" member) are read
// and completed as before but not counted; a record of a format newer than
// idemFormat is a store error, never an answer.
type IdempotencyStore struct {
	db    *bbolt.DB
	clock idkeeper.Clock
	own   bool // Close closes db
}

var _ idempotency.Store = (*IdempotencyStore)(nil)

var (
	bucketIdem       = []byte("idempotency")
	bucketIdemExpiry = []byte("idempotency-expiry")
	bucketIdemOwners = []byte("idempotency-owners")
	bucketIdemCounts = []byte("idempotency-counts")
	idemTotalsKey    = []byte("t")
)

// purgeBatch bounds the lapsed records one Begin deletes, so a backlog costs no
// single request much.
const purgeBatch = 16

// idemFormat is the record format this build writes: 2, counted records. Format 1
// records (written before) have no "v" member.
const idemFormat = 2

// OpenIdempotency opens or creates an idempotency file at path, with the Clock and
// Timeout of opts (Logger is unused). It waits up to opts.Timeout for the file lock
// and returns an error wrapping ErrLocked when another process keeps it.
func OpenIdempotency(path string, opts Options) (*IdempotencyStore, error) {
	db, err := openFile(path, opts)
	if err != nil {
		return nil, err
	}
	return &IdempotencyStore{db: db, clock: opts.clock(), own: true}, nil
}

// Idempotency returns an IdempotencyStore in the Store's own file, on the Store's
// clock. Its Close does nothing; closing the Store closes it.
func (s *Store) Idempotency() *IdempotencyStore {
	return &IdempotencyStore{db: s.db, clock: s.clock}
}

// Ping checks that the file is open and readable.
func (s *IdempotencyStore) Ping(context.Context) error {
	return s.db.View(func(*bbolt.Tx) error { return nil })
}

// Close closes a file that OpenIdempotency opened.
func (s *IdempotencyStore) Close() error {
	if !s.own {
		return nil
	}
	return s.db.Close()
}

// idemRec is the stored form of an idempotency.Record.
type idemRec struct {
	V           int                 `json:"v,omitempty"`     // format: absent for 1, idemFormat
	Owner       string              `json:"owner,omitempty"` // format 2: the owner it counts against
	State       idempotency.State   `json:"state"`
	Fingerprint string              `json:"fingerprint"`
	Token       string              `json:"token,omitempty"` // owner of an in-flight marker
	Status      int                 `json:"status,omitempty"`
	Header      map[string][]string `json:"header,omitempty"`
	Body        []byte              `json:"body,omitempty"`
	CreatedAt   int64               `json:"createdAt"`
	LockedUntil int64               `json:"lockedUntil,omitempty"`
	ExpiresAt   int64               `json:"expiresAt"`

	size int64 // bytes of key and value, as read or written
}

func (r *idemRec) counted() bool { return r.V >= idemFormat }

func (r *idemRec) record(scope string) *idempotency.Record {
	out := &idempotency.Record{
		Scope: scope, Fingerprint: r.Fingerprint, State: r.State, Outcome: r.Status, Metadata: r.Header, Body: r.Body,
		CreatedAt: msTime(r.CreatedAt), ExpiresAt: msTime(r.ExpiresAt),
	}
	if r.State == idempotency.InFlight {
		out.LockedUntil = msTime(r.LockedUntil)
	}
	return out
}

func idemExpiryKey(expiresAt int64, scope string) []byte {
	k := binary.BigEndian.AppendUint64(make([]byte, 0, 8+len(scope)), sortable(expiresAt))
	return append(k, scope...)
}

// idemOwnerPrefix starts the owners-index keys of owner.
func idemOwnerPrefix(owner string) []byte {
	k := binary.BigEndian.AppendUint16(make([]byte, 0, 2+len(owner)+8), uint16(len(owner)))
	return append(k, owner...)
}

func idemOwnerKey(owner string, expiresAt int64, scope string) []byte {
	k := binary.BigEndian.AppendUint64(idemOwnerPrefix(owner), sortable(expiresAt))
	return append(k, scope...)
}

func idemCountKey(owner string) []byte { return append([]byte("o"), owner...) }

// idemTxn is one transaction over the idempotency buckets at the instant now.
type idemTxn struct {
	recs, expiry, owners, counts *bbolt.Bucket
	now                          int64 // Unix ms
}

func (s *IdempotencyStore) update(ctx context.Context, fn func(*idemTxn) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	err := s.db.Update(func(tx *bbolt.Tx) error {
		t := &idemTxn{now: timeMs(s.clock())}
		for _, b := range []struct {
			name []byte
			dst  **bbolt.Bucket
		}{{bucketIdem, &t.recs}, {bucketIdemExpiry, &t.expiry}, {bucketIdemOwners, &t.owners}, {bucketIdemCounts, &t.counts}} {
			var err error
			if *b.dst, err = tx.CreateBucketIfNotExists(b.name); err != nil {
				return err
			}
		}
		return fn(t)
	})
	return wrap(err)
}

// errNewerFormat marks a record of a format newer than idemFormat.
var errNewerFormat = errors.New("a newer format")

// decodeIdem decodes the stored record of scope. A record of a newer format is
// returned with an error wrapping errNewerFormat: only its times may be used.
func decodeIdem(scope string, v []byte) (*idemRec, error) {
	var r idemRec
	if err := json.Unmarshal(v, &r); err != nil {
		return nil, fmt.Errorf("corrupt idempotency record %q: %w", scope, err)
	}
	r.size = int64(len(scope) + len(v))
	if r.V > idemFormat {
		return &r, fmt.Errorf("idempotency record %q has format %d, %w than this build reads (%d)", scope, r.V, errNewerFormat, idemFormat)
	}
	return &r, nil
}

// get returns the record of scope, live or not; nil when there is none.
func (t *idemTxn) get(scope string) (*idemRec, error) {
	v := t.recs.Get([]byte(scope))
	if v == nil {
		return nil, nil
	}
	return decodeIdem(scope, v)
}

// put replaces the record of scope, whose previous record is old (nil for none),
// keeping the indexes and counts in step.
func (t *idemTxn) put(scope string, old, r *idemRec) error {
	if err := t.del(scope, old); err != nil {
		return err
	}
	v, err := json.Marshal(r)
	if err != nil {
		return err
	}
	r.size = int64(len(scope) + len(v))
	if err := t.recs.Put([]byte(scope), v); err != nil {
		return err
	}
	if err := t.expiry.Put(idemExpiryKey(r.ExpiresAt, scope), nil); err != nil {
		return err
	}
	if !r.counted() {
		return nil
	}
	if err := t.owners.Put(idemOwnerKey(r.Owner, r.ExpiresAt, scope), nil); err != nil {
		return err
	}
	return t.count(r.Owner, 1, r.size)
}

// del deletes the record old of scope; nothing when old is nil.
func (t *idemTxn) del(scope string, old *idemRec) error {
	if old == nil {
		return nil
	}
	if err := t.expiry.Delete(idemExpiryKey(old.ExpiresAt, scope)); err != nil {
		return err
	}
	if err := t.recs.Delete([]byte(scope)); err != nil {
		return err
	}
	if !old.counted() {
		return nil
	}
	if err := t.owners.Delete(idemOwnerKey(old.Owner, old.ExpiresAt, scope)); err != nil {
		return err
	}
	return t.count(old.Owner, -1, -old.size)
}

// count adds n records of size bytes to owner's counts and the totals.
func (t *idemTxn) count(owner string, n, size int64) error {
	for _, k := range [][]byte{idemCountKey(owner), idemTotalsKey} {
		records, bytes := t.counted(k)
		records, bytes = records+n, bytes+size
		var err error
		if records <= 0 {
			err = t.counts.Delete(k)
		} else {
			err = t.counts.Put(k, binary.BigEndian.AppendUint64(putU64(uint64(records)), uint64(bytes)))
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// counted returns the records and bytes counted under k.
func (t *idemTxn) counted(k []byte) (records, bytes int64) {
	v := t.counts.Get(k)
	if len(v) != 16 {
		return 0, 0
	}
	return getI64(v, 0), getI64(v, 8)
}

// drop deletes the record of scope that the index entry at expiresAt names, if it
// is still that record; otherwise just the stale entry. A record this build
// cannot decode is deleted without counting: it has lapsed.
func (t *idemTxn) drop(scope string, expiresAt int64, entry []byte, index *bbolt.Bucket) error {
	r, err := t.get(scope)
	switch {
	case err != nil:
		if err := t.recs.Delete([]byte(scope)); err != nil {
			return err
		}
	case r != nil && r.ExpiresAt == expiresAt:
		return t.del(scope, r)
	}
	return index.Delete(entry)
}

// purge deletes up to limit lapsed records (all when limit < 0), oldest first, and
// returns how many it deleted.
func (t *idemTxn) purge(limit int) (int, error) {
	var lapsed [][]byte
	c := t.expiry.Cursor()
	for k, _ := c.First(); k != nil && len(k) >= 8 && keyTime(k) <= t.now; k, _ = c.Next() {
		if limit >= 0 && len(lapsed) == limit {
			break
		}
		lapsed = append(lapsed, bytes.Clone(k))
	}
	for _, k := range lapsed {
		if err := t.drop(string(k[8:]), keyTime(k), k, t.expiry); err != nil {
			return 0, err
		}
	}
	return len(lapsed), nil
}

// purgeOwner deletes every lapsed record of owner.
func (t *idemTxn) purgeOwner(owner string) error {
	prefix := idemOwnerPrefix(owner)
	var lapsed [][]byte
	c := t.owners.Cursor()
	for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix) && len(k) >= len(prefix)+8 && keyTime(k[len(prefix):]) <= t.now; k, _ = c.Next() {
		lapsed = append(lapsed, bytes.Clone(k))
	}
	for _, k := range lapsed {
		if err := t.drop(string(k[len(prefix)+8:]), keyTime(k[len(prefix):]), k, t.owners); err != nil {
			return err
		}
	}
	return nil
}

// full returns the refusal of a new record of owner when it holds limit live
// records or more, else nil. It purges owner's lapsed records first when they
// might make the difference.
func (t *idemTxn) full(owner string, limit int) (*idempotency.CapError, error) {
	if limit <= 0 {
		return nil, nil
	}
	if n, _ := t.counted(idemCountKey(owner)); n < int64(limit) {
		return nil, nil
	}
	if err := t.purgeOwner(owner); err != nil {
		return nil, err
	}
	if n, _ := t.counted(idemCountKey(owner)); n < int64(limit) {
		return nil, nil
	}
	prefix := idemOwnerPrefix(owner)
	k, _ := t.owners.Cursor().Seek(prefix)
	wait := int64(time.Second / time.Millisecond)
	if k != nil && bytes.HasPrefix(k, prefix) && len(k) >= len(prefix)+8 {
		wait = keyTime(k[len(prefix):]) - t.now
	}
	return idempotency.NewCapError(limit, time.Duration(wait)*time.Millisecond), nil
}

// validOwner checks the arguments of IdempotencyStore.Owned.
func validOwner(owner string, limit int) error {
	switch {
	case len(owner) > idempotency.MaxScopeLen:
		return protocol.Invalidf("owner", "an idempotency owner must have at most %d bytes", idempotency.MaxScopeLen)
	case limit < 0:
		return protocol.Invalidf("maxRecords", "the most records of an owner must not be negative, got %d", limit)
	}
	return nil
}

// Begin implements idempotency.Store: a record of the owner "", uncapped.
func (s *IdempotencyStore) Begin(ctx context.Context, scope, fingerprint, token string, lockFor time.Duration) (*idempotency.Record, bool, error) {
	return s.Owned("", 0).Begin(ctx, scope, fingerprint, token, lockFor)
}

// Complete implements idempotency.Store for the records of the owner "".
func (s *IdempotencyStore) Complete(ctx context.Context, scope, token string, res idempotency.Stored, ttl time.Duration) error {
	return s.Owned("", 0).Complete(ctx, scope, token, res, ttl)
}

// Abort implements idempotency.Store for the records of the owner "".
func (s *IdempotencyStore) Abort(ctx context.Context, scope, token string) error {
	return s.Owned("", 0).Abort(ctx, scope, token)
}

// Owned returns the view of owner's records, capped at maxRecords (0: no cap),
// as idempotency.CountingStore defines it.
func (s *IdempotencyStore) Owned(owner string, maxRecords int) idempotency.Store {
	return &idemOwned{s: s, owner: owner, max: maxRecords}
}

// idemOwned is IdempotencyStore.Owned.
type idemOwned struct {
	s     *IdempotencyStore
	owner string
	max   int
}

func (o *idemOwned) valid() error { return validOwner(o.owner, o.max) }

// Begin implements idempotency.Store, counting the marker against the
// owner and refusing it when the owner is full.
func (o *idemOwned) Begin(ctx context.Context, scope, fingerprint, token string, lockFor time.Duration) (*idempotency.Record, bool, error) {
	if err := idempotency.ValidateBegin(scope, fingerprint, token, lockFor); err != nil {
		return nil, false, err
	}
	if err := o.valid(); err != nil {
		return nil, false, err
	}
	var existing *idempotency.Record
	var refused *idempotency.CapError
	err := o.s.update(ctx, func(t *idemTxn) error {
		existing, refused = nil, nil
		if _, err := t.purge(purgeBatch); err != nil {
			return err
		}
		old, err := t.get(scope)
		switch {
		case errors.Is(err, errNewerFormat) && t.now >= old.ExpiresAt:
			old = nil // lapsed: overwritten, its index entries dropped as stale
		case err != nil:
			return err
		case old != nil && t.now < old.ExpiresAt:
			existing = old.record(scope)
			return nil
		}
		if refused, err = t.full(o.owner, o.max); refused != nil || err != nil {
			return err
		}
		if old, err = t.get(scope); errors.Is(err, errNewerFormat) { // full may have purged it
			old = nil
		} else if err != nil {
			return err
		}
		until := t.now + lockFor.Milliseconds()
		return t.put(scope, old, &idemRec{
			V: idemFormat, Owner: o.owner,
			State: idempotency.InFlight, Fingerprint: fingerprint, Token: token,
			CreatedAt: t.now, LockedUntil: until, ExpiresAt: until,
		})
	})
	switch {
	case err != nil:
		return nil, false, err
	case refused != nil:
		return nil, false, refused
	}
	return existing, existing == nil, nil
}

// ours reports whether r is the in-flight marker of token that o may settle.
func (o *idemOwned) ours(r *idemRec, token string) bool {
	return r != nil && r.State == idempotency.InFlight && r.Token == token && (!r.counted() || r.Owner == o.owner)
}

// Complete implements idempotency.Store.
func (o *idemOwned) Complete(ctx context.Context, scope, token string, res idempotency.Stored, ttl time.Duration) error {
	if err := idempotency.ValidateComplete(scope, token, res, ttl); err != nil {
		return err
	}
	if err := o.valid(); err != nil {
		return err
	}
	return o.s.update(ctx, func(t *idemTxn) error {
		old, err := t.get(scope)
		if err != nil {
			return err
		}
		if !o.ours(old, token) || t.now >= old.LockedUntil {
			return idempotency.ErrMarkerLost
		}
		return t.put(scope, old, &idemRec{
			V: old.V, Owner: old.Owner,
			State: idempotency.Completed, Fingerprint: old.Fingerprint,
			Status: res.Outcome, Header: res.Metadata, Body: res.Body,
			CreatedAt: old.CreatedAt, ExpiresAt: t.now + ttl.Milliseconds(),
		})
	})
}

// Abort implements idempotency.Store.
func (o *idemOwned) Abort(ctx context.Context, scope, token string) error {
	if err := idempotency.ValidateAbort(scope, token); err != nil {
		return err
	}
	if err := o.valid(); err != nil {
		return err
	}
	return o.s.update(ctx, func(t *idemTxn) error {
		old, err := t.get(scope)
		if err != nil || !o.ours(old, token) {
			return err
		}
		return t.del(scope, old)
	})
}

// Purge deletes every lapsed record and returns how many it deleted. Begin purges
// as it goes; Purge is for a periodic job or an operator.
func (s *IdempotencyStore) Purge(ctx context.Context) (int, error) {
	var n int
	err := s.update(ctx, func(t *idemTxn) error {
		var err error
		n, err = t.purge(-1)
		return err
	})
	return n, err
}

// Stats returns the live counted records and their bytes, as
// idempotency.CountingStore defines it: the counts less the lapsed records that
// no Begin has purged yet. It is one read-only transaction.
func (s *IdempotencyStore) Stats(ctx context.Context) (records, bytes int64, err error) {
	if err := ctx.Err(); err != nil {
		return 0, 0, err
	}
	err = s.db.View(func(tx *bbolt.Tx) error {
		counts, expiry, recs := tx.Bucket(bucketIdemCounts), tx.Bucket(bucketIdemExpiry), tx.Bucket(bucketIdem)
		if counts == nil || expiry == nil || recs == nil {
			return nil
		}
		if v := counts.Get(idemTotalsKey); len(v) == 16 {
			records, bytes = getI64(v, 0), getI64(v, 8)
		}
		now := timeMs(s.clock())
		c := expiry.Cursor()
		for k, _ := c.First(); k != nil && len(k) >= 8 && keyTime(k) <= now; k, _ = c.Next() {
			scope := string(k[8:])
			v := recs.Get(k[8:])
			if v == nil {
				continue
			}
			if r, err := decodeIdem(scope, v); err == nil && r.counted() && r.ExpiresAt == keyTime(k) {
				records, bytes = records-1, bytes-r.size
			}
		}
		return nil
	})
	return records, bytes, wrap(err)
}
