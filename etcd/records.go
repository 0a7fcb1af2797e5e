package etcd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/internal/leasetx"
	"github.com/idkeeper/idkeeper/protocol"
)

// The records outside the lease pool: job locks, API keys and clock-skew
// observations. Each lives under a key of its own and changes by compare and set
// on that key's revision (cas), apart from the lease transactions and their meta
// record.

// casOp is what a cas change asks for.
type casOp int

const (
	casKeep casOp = iota
	casPut
	casDelete
)

// cas reads key and applies change to its value (ok false: absent); when change
// asks for a write, it is made only if the key is unchanged since the read, else
// it all starts over, a bounded number of times. An error of change is returned
// as it is, with nothing written.
func (s *Store) cas(ctx context.Context, op, key string, change func(v []byte, ok bool) (casOp, string, error)) error {
	return s.casOps(ctx, op, key, func(v []byte, ok bool) ([]clientv3.Op, error) {
		what, nv, err := change(v, ok)
		switch {
		case err != nil || what == casKeep:
			return nil, err
		case what == casPut:
			return []clientv3.Op{clientv3.OpPut(key, nv)}, nil
		}
		return []clientv3.Op{clientv3.OpDelete(key)}, nil
	})
}

// casOps reads key and commits the ops change returns for its value (ok false:
// absent; no ops: nothing to write) on the condition that key is unchanged since
// the read; else it starts over, at most maxConflicts times, backing off. An
// error of change is returned as it is, with nothing written.
func (s *Store) casOps(ctx context.Context, op, key string, change func(v []byte, ok bool) ([]clientv3.Op, error)) error {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	for n := 1; ; n++ {
		resp, err := s.c.Get(ctx, key)
		if err != nil {
			return wrap(op, err)
		}
		var v []byte
		rev, ok := int64(0), len(resp.Kvs) == 1
		if ok {
			v, rev = resp.Kvs[0].Value, resp.Kvs[0].ModRevision
		}
		ops, err := change(v, ok)
		if err != nil || len(ops) == 0 {
			return err
		}
		tr, err := s.c.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).Then(ops...).Commit()
		if err != nil {
			return wrap(op, err)
		}
		if tr.Succeeded {
			return nil
		}
		if n >= maxConflicts {
			return fmt.Errorf("etcd: %s: %d attempts in a row lost to other writers", op, n)
		}
		if err := leasetx.Backoff(ctx, n); err != nil {
			return wrap(op, err)
		}
	}
}

// lockRec is the JSON of a job lock.
type lockRec struct {
	Owner    string `json:"owner"`
	LockedAt int64  `json:"lockedAt"` // Unix ms
	Until    int64  `json:"until"`
}

func decodeLock(name string, v []byte) (idkeeper.Lock, error) {
	var r lockRec
	if err := json.Unmarshal(v, &r); err != nil {
		return idkeeper.Lock{}, fmt.Errorf("etcd: malformed lock %q: %w", name, err)
	}
	return idkeeper.Lock{Name: name, Owner: r.Owner, LockedAt: msTime(r.LockedAt), Until: msTime(r.Until)}, nil
}

// TryLock implements idkeeper.LockStore, timed by Options.Clock: a lock is free
// once now reaches its Until.
func (s *Store) TryLock(ctx context.Context, name, owner string, atMostFor time.Duration) (idkeeper.Lock, bool, error) {
	var out idkeeper.Lock
	var got bool
	err := s.cas(ctx, "trylock", s.k.lock+name, func(v []byte, ok bool) (casOp, string, error) {
		now := s.nowMs()
		if ok {
			l, err := decodeLock(name, v)
			if err != nil {
				return casKeep, "", err
			}
			if now < l.Until.UnixMilli() {
				out, got = l, false
				return casKeep, "", nil
			}
		}
		rec, err := jsonString(lockRec{Owner: owner, LockedAt: now, Until: now + atMostFor.Milliseconds()})
		out, got = idkeeper.Lock{Name: name, Owner: owner, LockedAt: msTime(now), Until: msTime(now + atMostFor.Milliseconds())}, true
		return casPut, rec, err
	})
	if err != nil {
		return idkeeper.Lock{}, false, err
	}
	return out, got, nil
}

// Unlock implements idkeeper.LockStore: a lock whose Until has passed is no
// longer held; Unlock leaves it alone and reports false.
func (s *Store) Unlock(ctx context.Context, name, owner string, atLeastFor time.Duration) (bool, error) {
	var held bool
	err := s.cas(ctx, "unlock", s.k.lock+name, func(v []byte, ok bool) (casOp, string, error) {
		held = false
		if !ok {
			return casKeep, "", nil
		}
		l, err := decodeLock(name, v)
		if err != nil {
			return casKeep, "", err
		}
		now := s.nowMs()
		if l.Owner != owner || now >= l.Until.UnixMilli() {
			return casKeep, "", nil
		}
		held = true
		if keep := l.LockedAt.UnixMilli() + atLeastFor.Milliseconds(); keep > now {
			rec, err := jsonString(lockRec{Owner: owner, LockedAt: l.LockedAt.UnixMilli(), Until: keep})
			return casPut, rec, err
		}
		return casDelete, "", nil
	})
	return held, err
}

// Locks implements idkeeper.LockStore: one range read, in key (name) order.
func (s *Store) Locks(ctx context.Context) ([]idkeeper.Lock, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	resp, err := s.c.Get(ctx, s.k.lock, clientv3.WithPrefix())
	if err != nil {
		return nil, wrap("locks", err)
	}
	now := s.nowMs()
	out := []idkeeper.Lock{}
	for _, e := range resp.Kvs {
		l, err := decodeLock(strings.TrimPrefix(string(e.Key), s.k.lock), e.Value)
		if err != nil {
			return nil, err
		}
		if now < l.Until.UnixMilli() {
			out = append(out, l)
		}
	}
	return out, nil
}

// apiKeyRec is the JSON of an API key. Times are UTC milliseconds; a zero time is
// Go's zero time and reads back as zero.
type apiKeyRec struct {
	Hash        []byte    `json:"hash"`
	Description string    `json:"description,omitempty"`
	CreatedAt   time.Time `json:"createdAt"`
	CreatedBy   string    `json:"createdBy,omitempty"`
	ExpiresAt   time.Time `json:"expiresAt"`
	MaxNodes    int       `json:"maxNodes,omitempty"`
	Bootstrap   bool      `json:"bootstrap,omitempty"`
	Admin       bool      `json:"admin,omitempty"`
	RevokedAt   time.Time `json:"revokedAt"`
	LastUsedAt  time.Time `json:"lastUsedAt"`
}

func encodeAPIKey(k idkeeper.APIKey) (string, error) {
	return jsonString(apiKeyRec{Hash: k.Hash, Description: k.Description, CreatedAt: protocol.Millis(k.CreatedAt),
		CreatedBy: k.CreatedBy, ExpiresAt: protocol.Millis(k.ExpiresAt), MaxNodes: k.MaxNodes, Bootstrap: k.Bootstrap,
		Admin: k.Admin, RevokedAt: protocol.Millis(k.RevokedAt), LastUsedAt: protocol.Millis(k.LastUsedAt)})
}

func decodeAPIKey(id string, v []byte) (idkeeper.APIKey, error) {
	var r apiKeyRec
	if err := json.Unmarshal(v, &r); err != nil {
		return idkeeper.APIKey{}, fmt.Errorf("etcd: malformed api key %q: %w", id, err)
	}
	return idkeeper.APIKey{ID: id, Hash: r.Hash, Description: r.Description, CreatedAt: r.CreatedAt.UTC(),
		CreatedBy: r.CreatedBy, ExpiresAt: r.ExpiresAt.UTC(), MaxNodes: r.MaxNodes, Bootstrap: r.Bootstrap, Admin: r.Admin,
		RevokedAt: r.RevokedAt.UTC(), LastUsedAt: r.LastUsedAt.UTC()}, nil
}

// CreateAPIKey implements idkeeper.KeyStore: a put on the condition that the key
// was never created.
func (s *Store) CreateAPIKey(ctx context.Context, k idkeeper.APIKey) error {
	rec, err := encodeAPIKey(k)
	if err != nil {
		return fmt.Errorf("etcd: api key: %w", err)
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	key := s.k.apiKey + k.ID
	tr, err := s.c.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).Then(clientv3.OpPut(key, rec)).Commit()
	if err != nil {
		return wrap("create api key", err)
	}
	if !tr.Succeeded {
		return idkeeper.ErrConflict
	}
	return nil
}

// APIKey implements idkeeper.KeyStore.
func (s *Store) APIKey(ctx context.Context, id string) (idkeeper.APIKey, error) {
	return getRecord(ctx, s, "api key", s.k.apiKey, id, decodeAPIKey)
}

// APIKeys implements idkeeper.KeyStore: one range read, in key (ID) order.
func (s *Store) APIKeys(ctx context.Context) ([]idkeeper.APIKey, error) {
	return getRecords(ctx, s, "api keys", s.k.apiKey, decodeAPIKey)
}

// getRecord reads the record prefix+name and decodes it with its name;
// ErrNotFound when there is none. op names the read in errors.
func getRecord[T any](ctx context.Context, s *Store, op, prefix, name string, decode func(name string, v []byte) (T, error)) (T, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var zero T
	resp, err := s.c.Get(ctx, prefix+name)
	if err != nil {
		return zero, wrap(op, err)
	}
	if len(resp.Kvs) == 0 {
		return zero, idkeeper.ErrNotFound
	}
	return decode(name, resp.Kvs[0].Value)
}

// getRecords reads every record under prefix in one range read, in key order,
// each decoded with its name (the key without prefix).
func getRecords[T any](ctx context.Context, s *Store, op, prefix string, decode func(name string, v []byte) (T, error)) ([]T, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	resp, err := s.c.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		return nil, wrap(op, err)
	}
	out := make([]T, 0, len(resp.Kvs))
	for _, e := range resp.Kvs {
		r, err := decode(strings.TrimPrefix(string(e.Key), prefix), e.Value)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// RevokeAPIKey implements idkeeper.KeyStore.
func (s *Store) RevokeAPIKey(ctx context.Context, id string, at time.Time) error {
	_, err := s.changeAPIKey(ctx, "revoke api key", id, func(k *idkeeper.APIKey) (bool, error) {
		if k.Revoked() {
			return false, nil
		}
		k.RevokedAt = protocol.Millis(at)
		return true, nil
	})
	return err
}

// TouchAPIKey implements idkeeper.KeyStore.
func (s *Store) TouchAPIKey(ctx context.Context, id string, at time.Time) error {
	_, err := s.changeAPIKey(ctx, "touch api key", id, func(k *idkeeper.APIKey) (bool, error) {
		if !protocol.Millis(at).After(k.LastUsedAt) {
			return false, nil
		}
		k.LastUsedAt = protocol.Millis(at)
		return true, nil
	})
	if errors.Is(err, idkeeper.ErrNotFound) {
		return nil
	}
	return err
}

// UpdateAPIKey implements idkeeper.KeyStore.
func (s *Store) UpdateAPIKey(ctx context.Context, id string, u idkeeper.KeyUpdate) (idkeeper.APIKey, error) {
	return s.changeAPIKey(ctx, "update api key", id, func(k *idkeeper.APIKey) (bool, error) {
		if k.Revoked() {
			return false, idkeeper.ErrConflict
		}
		if u.ExpiresAt != nil {
			k.ExpiresAt = protocol.Millis(*u.ExpiresAt)
		}
		if u.MaxNodes != nil {
			k.MaxNodes = *u.MaxNodes
		}
		return true, nil
	})
}

// changeAPIKey applies change to the key's record by compare and set and returns
// the key as it is afterwards; ErrNotFound when there is none.
func (s *Store) changeAPIKey(ctx context.Context, op, id string, change func(*idkeeper.APIKey) (bool, error)) (idkeeper.APIKey, error) {
	var out idkeeper.APIKey
	err := s.cas(ctx, op, s.k.apiKey+id, func(v []byte, ok bool) (casOp, string, error) {
		if !ok {
			return casKeep, "", idkeeper.ErrNotFound
		}
		k, err := decodeAPIKey(id, v)
		if err != nil {
			return casKeep, "", err
		}
		changed, err := change(&k)
		if err != nil || !changed {
			out = k
			return casKeep, "", err
		}
		rec, err := encodeAPIKey(k)
		out = k
		return casPut, rec, err
	})
	if err != nil {
		return idkeeper.APIKey{}, err
	}
	return out, nil
}
