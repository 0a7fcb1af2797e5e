package bolt

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"time"

	bbolt "go.etcd.io/bbolt"

	"github.com/idkeeper/idkeeper"
)

// IdempotencyStore is the idkeeper.IdempotencyStore on a bbolt file: for a single
// process (one gateway, or `idkeeper dev`), since bbolt lets one process at a time
// open a file. Processes that share work need the redis store instead.
//
// Records live in two buckets of their own, created on first use, so the file may
// be a dedicated one (OpenIdempotency) or the registry's (Store.Idempotency):
//
//	idempotency          scope → JSON record (times in Unix ms)
//	idempotency-expiry   expiresAt (sign bit flipped) | scope → ∅
//
// Every method is one read-write transaction, on disk before it returns, and
// reads the clock inside it. Lapsed records are deleted lazily: every Begin
// deletes up to purgeBatch of them, oldest first, and Purge deletes them all.
type IdempotencyStore struct {
	db    *bbolt.DB
	clock idkeeper.Clock
	own   bool // Close closes db
}

var _ idkeeper.IdempotencyStore = (*IdempotencyStore)(nil)

var (
	bucketIdem       = []byte("idempotency")
	bucketIdemExpiry = []byte("idempotency-expiry")
)

// purgeBatch bounds the lapsed records one Begin deletes, so a backlog costs no
// single request much.
const purgeBatch = 16

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

// Close closes a file that OpenIdempotency opened.
func (s *IdempotencyStore) Close() error {
	if !s.own {
		return nil
	}
	return s.db.Close()
}

// idemRec is the stored form of an idkeeper.IdempotencyRecord.
type idemRec struct {
	State       idkeeper.IdempotencyState `json:"state"`
	Fingerprint string                    `json:"fingerprint"`
	Token       string                    `json:"token,omitempty"` // owner of an in-flight marker
	Status      int                       `json:"status,omitempty"`
	Header      map[string][]string       `json:"header,omitempty"`
	Body        []byte                    `json:"body,omitempty"`
	CreatedAt   int64                     `json:"createdAt"`
	LockedUntil int64                     `json:"lockedUntil,omitempty"`
	ExpiresAt   int64                     `json:"expiresAt"`
}

func (r *idemRec) record(scope string) *idkeeper.IdempotencyRecord {
	out := &idkeeper.IdempotencyRecord{
		Scope: scope, Fingerprint: r.Fingerprint, State: r.State, Status: r.Status, Header: r.Header, Body: r.Body,
		CreatedAt: msTime(r.CreatedAt), ExpiresAt: msTime(r.ExpiresAt),
	}
	if r.State == idkeeper.IdempotencyInFlight {
		out.LockedUntil = msTime(r.LockedUntil)
	}
	return out
}

func idemExpiryKey(expiresAt int64, scope string) []byte {
	k := binary.BigEndian.AppendUint64(make([]byte, 0, 8+len(scope)), sortable(expiresAt))
	return append(k, scope...)
}

// idemTxn is one transaction over the idempotency buckets at the instant now.
type idemTxn struct {
	recs, expiry *bbolt.Bucket
	now          int64 // Unix ms
}

func (s *IdempotencyStore) update(ctx context.Context, fn func(*idemTxn) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	err := s.db.Update(func(tx *bbolt.Tx) error {
		recs, err := tx.CreateBucketIfNotExists(bucketIdem)
		if err != nil {
			return err
		}
		expiry, err := tx.CreateBucketIfNotExists(bucketIdemExpiry)
		if err != nil {
			return err
		}
		return fn(&idemTxn{recs: recs, expiry: expiry, now: timeMs(s.clock())})
	})
	return wrap(err)
}

// get returns the record of scope, live or not; nil when there is none.
func (t *idemTxn) get(scope string) (*idemRec, error) {
	v := t.recs.Get([]byte(scope))
	if v == nil {
		return nil, nil
	}
	var r idemRec
	if err := json.Unmarshal(v, &r); err != nil {
		return nil, fmt.Errorf("corrupt idempotency record %q: %w", scope, err)
	}
	return &r, nil
}

// put replaces the record of scope, whose previous record is old (nil for none),
// keeping the expiry index in step.
func (t *idemTxn) put(scope string, old, r *idemRec) error {
	if err := t.del(scope, old); err != nil {
		return err
	}
	v, err := json.Marshal(r)
	if err != nil {
		return err
	}
	if err := t.recs.Put([]byte(scope), v); err != nil {
		return err
	}
	return t.expiry.Put(idemExpiryKey(r.ExpiresAt, scope), nil)
}

// del deletes the record old of scope; nothing when old is nil.
func (t *idemTxn) del(scope string, old *idemRec) error {
	if old == nil {
		return nil
	}
	if err := t.expiry.Delete(idemExpiryKey(old.ExpiresAt, scope)); err != nil {
		return err
	}
	return t.recs.Delete([]byte(scope))
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
		if err := t.expiry.Delete(k); err != nil {
			return 0, err
		}
		if err := t.recs.Delete(k[8:]); err != nil {
			return 0, err
		}
	}
	return len(lapsed), nil
}

// Begin implements idkeeper.IdempotencyStore.
func (s *IdempotencyStore) Begin(ctx context.Context, scope, fingerprint, token string, lockFor time.Duration) (*idkeeper.IdempotencyRecord, bool, error) {
	if err := idkeeper.ValidateIdempotencyBegin(scope, fingerprint, token, lockFor); err != nil {
		return nil, false, err
	}
	var existing *idkeeper.IdempotencyRecord
	err := s.update(ctx, func(t *idemTxn) error {
		existing = nil
		if _, err := t.purge(purgeBatch); err != nil {
			return err
		}
		old, err := t.get(scope)
		if err != nil {
			return err
		}
		if old != nil && t.now < old.ExpiresAt {
			existing = old.record(scope)
			return nil
		}
		until := t.now + lockFor.Milliseconds()
		return t.put(scope, old, &idemRec{
			State: idkeeper.IdempotencyInFlight, Fingerprint: fingerprint, Token: token,
			CreatedAt: t.now, LockedUntil: until, ExpiresAt: until,
		})
	})
	if err != nil {
		return nil, false, err
	}
	return existing, existing == nil, nil
}

// Complete implements idkeeper.IdempotencyStore.
func (s *IdempotencyStore) Complete(ctx context.Context, scope, token string, res idkeeper.IdempotencyResult, ttl time.Duration) error {
	if err := idkeeper.ValidateIdempotencyComplete(scope, token, res, ttl); err != nil {
		return err
	}
	return s.update(ctx, func(t *idemTxn) error {
		old, err := t.get(scope)
		if err != nil {
			return err
		}
		if old == nil || old.State != idkeeper.IdempotencyInFlight || old.Token != token || t.now >= old.LockedUntil {
			return idkeeper.ErrIdempotencyMarkerLost
		}
		return t.put(scope, old, &idemRec{
			State: idkeeper.IdempotencyCompleted, Fingerprint: old.Fingerprint,
			Status: res.Status, Header: res.Header, Body: res.Body,
			CreatedAt: old.CreatedAt, ExpiresAt: t.now + ttl.Milliseconds(),
		})
	})
}

// Abort implements idkeeper.IdempotencyStore.
func (s *IdempotencyStore) Abort(ctx context.Context, scope, token string) error {
	if err := idkeeper.ValidateIdempotencyAbort(scope, token); err != nil {
		return err
	}
	return s.update(ctx, func(t *idemTxn) error {
		old, err := t.get(scope)
		if err != nil || old == nil || old.State != idkeeper.IdempotencyInFlight || old.Token != token {
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
