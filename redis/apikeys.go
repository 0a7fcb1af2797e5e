package redis

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/protocol"
)

// apiKeyRecord is the JSON of one API key in the apikeys hash. Times are UTC
// milliseconds; a zero time is stored as Go's zero time and reads back as zero.
type apiKeyRecord struct {
	Hash        []byte    `json:"hash"`
	Description string    `json:"description,omitempty"`
	CreatedAt   time.Time `json:"createdAt"`
	CreatedBy   string    `json:"createdBy,omitempty"` // absent in records written before it: not known
	ExpiresAt   time.Time `json:"expiresAt"`
	MaxNodes    int       `json:"maxNodes,omitempty"`
	Bootstrap   bool      `json:"bootstrap,omitempty"`
	Admin       bool      `json:"admin,omitempty"` // absent in records written before it: not an admin key
	RevokedAt   time.Time `json:"revokedAt"`
	LastUsedAt  time.Time `json:"lastUsedAt"`
}

func encodeAPIKey(k idkeeper.APIKey) (string, error) {
	b, err := json.Marshal(apiKeyRecord{Hash: k.Hash, Description: k.Description, CreatedAt: protocol.Millis(k.CreatedAt),
		CreatedBy: k.CreatedBy, ExpiresAt: protocol.Millis(k.ExpiresAt), MaxNodes: k.MaxNodes, Bootstrap: k.Bootstrap, Admin: k.Admin,
		RevokedAt: protocol.Millis(k.RevokedAt), LastUsedAt: protocol.Millis(k.LastUsedAt)})
	if err != nil {
		return "", fmt.Errorf("redis: api key: %w", err)
	}
	return string(b), nil
}

func decodeAPIKey(id, v string) (idkeeper.APIKey, error) {
	var r apiKeyRecord
	if err := json.Unmarshal([]byte(v), &r); err != nil {
		return idkeeper.APIKey{}, fmt.Errorf("redis: malformed api key %q: %w", id, err)
	}
	return idkeeper.APIKey{ID: id, Hash: r.Hash, Description: r.Description, CreatedAt: r.CreatedAt.UTC(), CreatedBy: r.CreatedBy,
		ExpiresAt: r.ExpiresAt.UTC(), MaxNodes: r.MaxNodes, Bootstrap: r.Bootstrap, Admin: r.Admin, RevokedAt: r.RevokedAt.UTC(),
		LastUsedAt: r.LastUsedAt.UTC()}, nil
}

// CreateAPIKey stores k; ErrConflict when its ID exists.
func (s *Store) CreateAPIKey(ctx context.Context, k idkeeper.APIKey) error {
	rec, err := encodeAPIKey(k)
	if err != nil {
		return err
	}
	created, err := s.client.HSetNX(ctx, s.keys.apiKeys, k.ID, rec).Result()
	if err != nil {
		return fmt.Errorf("redis: create api key: %w", err)
	}
	if !created {
		return idkeeper.ErrConflict
	}
	return nil
}

// APIKey returns the key with that ID; ErrNotFound when there is none.
func (s *Store) APIKey(ctx context.Context, id string) (idkeeper.APIKey, error) {
	k, _, err := s.apiKey(ctx, id)
	return k, err
}

// apiKey returns the key with that ID and its record as stored.
func (s *Store) apiKey(ctx context.Context, id string) (idkeeper.APIKey, string, error) {
	v, err := s.client.HGet(ctx, s.keys.apiKeys, id).Result()
	if errors.Is(err, goredis.Nil) {
		return idkeeper.APIKey{}, "", idkeeper.ErrNotFound
	}
	if err != nil {
		return idkeeper.APIKey{}, "", fmt.Errorf("redis: api key: %w", err)
	}
	k, err := decodeAPIKey(id, v)
	return k, v, err
}

// APIKeys returns every key, revoked ones included, sorted by ID.
func (s *Store) APIKeys(ctx context.Context) ([]idkeeper.APIKey, error) {
	m, err := s.client.HGetAll(ctx, s.keys.apiKeys).Result()
	if err != nil {
		return nil, fmt.Errorf("redis: api keys: %w", err)
	}
	out := make([]idkeeper.APIKey, 0, len(m))
	for id, v := range m {
		k, err := decodeAPIKey(id, v)
		if err != nil {
			return nil, err
		}
		out = append(out, k)
	}
	slices.SortFunc(out, func(a, b idkeeper.APIKey) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

// RevokeAPIKey sets the key's RevokedAt to at unless it is revoked already;
// ErrNotFound when there is none. The record stays.
func (s *Store) RevokeAPIKey(ctx context.Context, id string, at time.Time) error {
	return s.updateAPIKey(ctx, "revoke", id, true, func(k *idkeeper.APIKey) bool {
		if k.Revoked() {
			return false
		}
		k.RevokedAt = protocol.Millis(at)
		return true
	})
}

// TouchAPIKey raises the key's LastUsedAt to at, never lowering it; a missing key
// is no error.
func (s *Store) TouchAPIKey(ctx context.Context, id string, at time.Time) error {
	return s.updateAPIKey(ctx, "touch", id, false, func(k *idkeeper.APIKey) bool {
		if !protocol.Millis(at).After(k.LastUsedAt) {
			return false
		}
		k.LastUsedAt = protocol.Millis(at)
		return true
	})
}

// UpdateAPIKey changes the key's expiry and quota as u says and returns it as it
// is afterwards; ErrNotFound when there is none, ErrConflict (changing nothing)
// when it is revoked. It is a compare and set, as updateAPIKey.
func (s *Store) UpdateAPIKey(ctx context.Context, id string, u idkeeper.KeyUpdate) (idkeeper.APIKey, error) {
	return s.casAPIKey(ctx, "update", id, func(k *idkeeper.APIKey) (bool, error) {
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

// updateAPIKey applies change to the key's record atomically (casAPIKey). change
// reports whether it changed anything. mustExist makes a missing key ErrNotFound;
// else it is no error.
func (s *Store) updateAPIKey(ctx context.Context, op, id string, mustExist bool, change func(*idkeeper.APIKey) bool) error {
	_, err := s.casAPIKey(ctx, op, id, func(k *idkeeper.APIKey) (bool, error) { return change(k), nil })
	if errors.Is(err, idkeeper.ErrNotFound) && !mustExist {
		return nil
	}
	return err
}

// casAPIKey applies change to the key's record atomically and returns the key as
// it is afterwards: it reads the record, and a script replaces it only when it is
// still the one read (compare and set), else it starts over. change reports
// whether it changed anything; an error of change is returned as it is, with
// nothing written. A missing key is ErrNotFound.
func (s *Store) casAPIKey(ctx context.Context, op, id string, change func(*idkeeper.APIKey) (bool, error)) (idkeeper.APIKey, error) {
	for range 100 {
		k, old, err := s.apiKey(ctx, id)
		if err != nil {
			return idkeeper.APIKey{}, err
		}
		changed, err := change(&k)
		if err != nil {
			return idkeeper.APIKey{}, err
		}
		if !changed {
			return k, nil
		}
		rec, err := encodeAPIKey(k)
		if err != nil {
			return idkeeper.APIKey{}, err
		}
		v, err := s.run(ctx, scriptAPIKeyCAS, []string{s.keys.apiKeys}, false, id, old, rec)
		if err != nil {
			return idkeeper.APIKey{}, wrap(op+" api key", err)
		}
		if v == int64(1) {
			return decodeAPIKey(id, rec)
		}
	}
	return idkeeper.APIKey{}, fmt.Errorf("redis: %s api key %q: the record kept changing", op, id)
}
