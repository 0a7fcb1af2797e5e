package bolt

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/protocol"
)

// lockRec is a job lock: lockedAt i64 | until i64 | owner.
type lockRec struct {
	lockedAt, until int64
	owner           string
}

func (l lockRec) encode() []byte {
	b := binary.BigEndian.AppendUint64(make([]byte, 0, 16+len(l.owner)), uint64(l.lockedAt))
	b = binary.BigEndian.AppendUint64(b, uint64(l.until))
	return append(b, l.owner...)
}

func decodeLock(b []byte) (lockRec, error) {
	if len(b) < 16 {
		return lockRec{}, fmt.Errorf("corrupt lock record of %d bytes", len(b))
	}
	return lockRec{lockedAt: getI64(b, 0), until: getI64(b, 8), owner: string(b[16:])}, nil
}

func (l lockRec) lock(name string) idkeeper.Lock {
	return idkeeper.Lock{Name: name, Owner: l.owner, LockedAt: msTime(l.lockedAt), Until: msTime(l.until)}
}

// TryLock implements idkeeper.LockStore. A lock lapses at its Until. When it fails,
// l is the lock that is held.
func (s *Store) TryLock(ctx context.Context, name, owner string, atMostFor time.Duration) (l idkeeper.Lock, ok bool, err error) {
	if name == "" {
		return idkeeper.Lock{}, false, protocol.Invalidf("name", "a lock needs a name")
	}
	err = s.update(ctx, nil, func(t *txn) error {
		b := t.tx.Bucket(bucketLocks)
		if v := b.Get([]byte(name)); v != nil {
			cur, err := decodeLock(v)
			if err != nil {
				return err
			}
			if t.now < cur.until {
				l = cur.lock(name)
				return nil
			}
		}
		rec := lockRec{lockedAt: t.now, until: t.now + atMostFor.Milliseconds(), owner: owner}
		l, ok = rec.lock(name), true
		return b.Put([]byte(name), rec.encode())
	})
	if err != nil {
		return idkeeper.Lock{}, false, err
	}
	return l, ok, nil
}

// Unlock implements idkeeper.LockStore. A lock that has lapsed is not held, even
// when nobody has taken it since.
func (s *Store) Unlock(ctx context.Context, name, owner string, atLeastFor time.Duration) (held bool, err error) {
	err = s.update(ctx, nil, func(t *txn) error {
		b := t.tx.Bucket(bucketLocks)
		v := b.Get([]byte(name))
		if v == nil {
			return nil
		}
		cur, err := decodeLock(v)
		if err != nil || cur.owner != owner || t.now >= cur.until {
			return err
		}
		held = true
		if keep := cur.lockedAt + atLeastFor.Milliseconds(); keep > t.now {
			cur.until = keep
			return b.Put([]byte(name), cur.encode())
		}
		return b.Delete([]byte(name))
	})
	return held, err
}

// Locks implements idkeeper.LockStore: one scan of the locks bucket, whose keys
// (the names) bbolt keeps sorted.
func (s *Store) Locks(ctx context.Context) ([]idkeeper.Lock, error) {
	out := []idkeeper.Lock{}
	err := s.view(ctx, func(t *txn) error {
		return t.tx.Bucket(bucketLocks).ForEach(func(k, v []byte) error {
			l, err := decodeLock(v)
			if err != nil {
				return fmt.Errorf("lock %q: %w", k, err)
			}
			if t.now < l.until {
				out = append(out, l.lock(string(k)))
			}
			return nil
		})
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// apiKeyRec is the JSON record of an API key; times are Unix ms.
type apiKeyRec struct {
	Hash        []byte `json:"hash"`
	Description string `json:"description"`
	CreatedAt   int64  `json:"createdAt"`
	CreatedBy   string `json:"createdBy,omitempty"` // absent in records written before it: not known
	ExpiresAt   int64  `json:"expiresAt"`
	MaxNodes    int    `json:"maxNodes,omitempty"`
	Bootstrap   bool   `json:"bootstrap,omitempty"`
	Admin       bool   `json:"admin,omitempty"` // absent in records written before it: not an admin key
	RevokedAt   int64  `json:"revokedAt"`
	LastUsedAt  int64  `json:"lastUsedAt"`
}

func apiKeyRecOf(k idkeeper.APIKey) apiKeyRec {
	return apiKeyRec{Hash: k.Hash, Description: k.Description, CreatedAt: timeMs(k.CreatedAt), CreatedBy: k.CreatedBy, ExpiresAt: timeMs(k.ExpiresAt),
		MaxNodes: k.MaxNodes, Bootstrap: k.Bootstrap, Admin: k.Admin, RevokedAt: timeMs(k.RevokedAt), LastUsedAt: timeMs(k.LastUsedAt)}
}

func decodeAPIKey(id string, v []byte) (idkeeper.APIKey, error) {
	var r apiKeyRec
	if err := json.Unmarshal(v, &r); err != nil {
		return idkeeper.APIKey{}, fmt.Errorf("corrupt API key %q: %w", id, err)
	}
	return idkeeper.APIKey{ID: id, Hash: r.Hash, Description: r.Description, CreatedAt: msTime(r.CreatedAt), CreatedBy: r.CreatedBy,
		ExpiresAt: msTime(r.ExpiresAt), MaxNodes: r.MaxNodes, Bootstrap: r.Bootstrap, Admin: r.Admin, RevokedAt: msTime(r.RevokedAt),
		LastUsedAt: msTime(r.LastUsedAt)}, nil
}

// CreateAPIKey implements idkeeper.KeyStore.
func (s *Store) CreateAPIKey(ctx context.Context, k idkeeper.APIKey) error {
	if k.ID == "" {
		return protocol.Invalidf("id", "an API key needs an ID")
	}
	v, err := json.Marshal(apiKeyRecOf(k))
	if err != nil {
		return err
	}
	return s.update(ctx, nil, func(t *txn) error {
		b := t.tx.Bucket(bucketAPIKeys)
		if b.Get([]byte(k.ID)) != nil {
			return idkeeper.ErrConflict
		}
		return b.Put([]byte(k.ID), v)
	})
}

// changeAPIKey applies fn to the key with that ID and stores it when fn reports a
// change; missing is returned when there is no such key.
func (s *Store) changeAPIKey(ctx context.Context, id string, missing error, fn func(*idkeeper.APIKey) bool) error {
	return s.update(ctx, nil, func(t *txn) error {
		b := t.tx.Bucket(bucketAPIKeys)
		v := b.Get([]byte(id))
		if v == nil {
			return missing
		}
		k, err := decodeAPIKey(id, v)
		if err != nil || !fn(&k) {
			return err
		}
		nv, err := json.Marshal(apiKeyRecOf(k))
		if err != nil {
			return err
		}
		return b.Put([]byte(id), nv)
	})
}

// RevokeAPIKey implements idkeeper.KeyStore.
func (s *Store) RevokeAPIKey(ctx context.Context, id string, at time.Time) error {
	return s.changeAPIKey(ctx, id, idkeeper.ErrNotFound, func(k *idkeeper.APIKey) bool {
		if k.Revoked() {
			return false
		}
		k.RevokedAt = protocol.Millis(at)
		return true
	})
}

// TouchAPIKey implements idkeeper.KeyStore.
func (s *Store) TouchAPIKey(ctx context.Context, id string, at time.Time) error {
	return s.changeAPIKey(ctx, id, nil, func(k *idkeeper.APIKey) bool {
		if !protocol.Millis(at).After(k.LastUsedAt) {
			return false
		}
		k.LastUsedAt = protocol.Millis(at)
		return true
	})
}

// UpdateAPIKey implements idkeeper.KeyStore, in one transaction.
func (s *Store) UpdateAPIKey(ctx context.Context, id string, u idkeeper.KeyUpdate) (idkeeper.APIKey, error) {
	var k idkeeper.APIKey
	err := s.update(ctx, nil, func(t *txn) error {
		b := t.tx.Bucket(bucketAPIKeys)
		v := b.Get([]byte(id))
		if v == nil {
			return idkeeper.ErrNotFound
		}
		var err error
		if k, err = decodeAPIKey(id, v); err != nil {
			return err
		}
		if k.Revoked() {
			return idkeeper.ErrConflict
		}
		if u.ExpiresAt != nil {
			k.ExpiresAt = msTime(timeMs(*u.ExpiresAt))
		}
		if u.MaxNodes != nil {
			k.MaxNodes = *u.MaxNodes
		}
		nv, err := json.Marshal(apiKeyRecOf(k))
		if err != nil {
			return err
		}
		return b.Put([]byte(id), nv)
	})
	if err != nil {
		return idkeeper.APIKey{}, err
	}
	return k, nil
}

// APIKey implements idkeeper.KeyStore.
func (s *Store) APIKey(ctx context.Context, id string) (idkeeper.APIKey, error) {
	var k idkeeper.APIKey
	err := s.view(ctx, func(t *txn) error {
		v := t.tx.Bucket(bucketAPIKeys).Get([]byte(id))
		if v == nil {
			return idkeeper.ErrNotFound
		}
		var err error
		k, err = decodeAPIKey(id, v)
		return err
	})
	return k, err
}

// APIKeys implements idkeeper.KeyStore.
func (s *Store) APIKeys(ctx context.Context) ([]idkeeper.APIKey, error) {
	out := []idkeeper.APIKey{}
	err := s.view(ctx, func(t *txn) error {
		return t.tx.Bucket(bucketAPIKeys).ForEach(func(k, v []byte) error {
			key, err := decodeAPIKey(string(k), v)
			out = append(out, key)
			return err
		})
	})
	return out, err
}

// skewRec is the JSON record of a skew observation; times are Unix ms, durations
// nanoseconds.
type skewRec struct {
	Skew       int64  `json:"skewNs"`
	Threshold  int64  `json:"thresholdNs"`
	Level      string `json:"level"`
	ObservedAt int64  `json:"observedAt"`
	RemoteIP   string `json:"remoteIp"`
	Operation  string `json:"operation"`
	Until      int64  `json:"until"` // lapses then
}

// RecordSkew implements idkeeper.SkewStore.
func (s *Store) RecordSkew(ctx context.Context, o idkeeper.SkewObservation, ttl time.Duration) error {
	if err := o.Requester.Validate(); err != nil {
		return err
	}
	return s.update(ctx, nil, func(t *txn) error {
		v, err := json.Marshal(skewRec{
			Skew: int64(o.Skew), Threshold: int64(o.Threshold), Level: string(o.Level), ObservedAt: timeMs(o.ObservedAt),
			RemoteIP: o.RemoteIP, Operation: o.Operation, Until: t.now + ttl.Milliseconds(),
		})
		if err != nil {
			return err
		}
		return t.tx.Bucket(bucketSkew).Put([]byte(o.Requester.Key()), v)
	})
}

// SkewObservations implements idkeeper.SkewStore. It reads in a read-only
// transaction and writes only when some observation has lapsed.
func (s *Store) SkewObservations(ctx context.Context) ([]idkeeper.SkewObservation, error) {
	var (
		out    []idkeeper.SkewObservation
		lapsed [][]byte
	)
	err := s.view(ctx, func(t *txn) error {
		out = []idkeeper.SkewObservation{}
		return t.tx.Bucket(bucketSkew).ForEach(func(k, v []byte) error {
			var r skewRec
			if err := json.Unmarshal(v, &r); err != nil {
				return fmt.Errorf("corrupt skew observation %q: %w", k, err)
			}
			if t.now >= r.Until {
				lapsed = append(lapsed, append([]byte(nil), k...))
				return nil
			}
			req, err := idkeeper.ParseRequesterKey(string(k))
			if err != nil {
				return err
			}
			out = append(out, idkeeper.SkewObservation{
				Requester: req, Skew: time.Duration(r.Skew), Threshold: time.Duration(r.Threshold),
				Level: idkeeper.SkewLevel(r.Level), ObservedAt: msTime(r.ObservedAt), RemoteIP: r.RemoteIP, Operation: r.Operation,
			})
			return nil
		})
	})
	if err != nil || len(lapsed) == 0 {
		return out, err
	}
	err = s.update(ctx, nil, func(t *txn) error {
		b := t.tx.Bucket(bucketSkew)
		for _, k := range lapsed {
			// Recorded again since the read: keep it.
			var r skewRec
			if v := b.Get(k); v == nil || json.Unmarshal(v, &r) != nil || t.now < r.Until {
				continue
			}
			if err := b.Delete(k); err != nil {
				return err
			}
		}
		return nil
	})
	return out, err
}
