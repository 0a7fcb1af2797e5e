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
)

// apiKeyRecord is the JSON of one API key in the apikeys hash.
type apiKeyRecord struct {
	Hash        []byte    `json:"hash"`
	Description string    `json:"description,omitempty"`
	CreatedAt   time.Time `json:"createdAt"`
	ExpiresAt   time.Time `json:"expiresAt"`
}

// CreateAPIKey stores k; ErrConflict when its ID exists.
func (s *Store) CreateAPIKey(ctx context.Context, k idkeeper.APIKey) error {
	b, err := json.Marshal(apiKeyRecord{Hash: k.Hash, Description: k.Description, CreatedAt: k.CreatedAt.UTC(), ExpiresAt: k.ExpiresAt.UTC()})
	if err != nil {
		return fmt.Errorf("redis: api key: %w", err)
	}
	created, err := s.client.HSetNX(ctx, s.keys.apiKeys, k.ID, b).Result()
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
	v, err := s.client.HGet(ctx, s.keys.apiKeys, id).Result()
	if errors.Is(err, goredis.Nil) {
		return idkeeper.APIKey{}, idkeeper.ErrNotFound
	}
	if err != nil {
		return idkeeper.APIKey{}, fmt.Errorf("redis: api key: %w", err)
	}
	return decodeAPIKey(id, v)
}

// APIKeys returns every key, sorted by ID.
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

// DeleteAPIKey deletes a key; ErrNotFound when there is none.
func (s *Store) DeleteAPIKey(ctx context.Context, id string) error {
	n, err := s.client.HDel(ctx, s.keys.apiKeys, id).Result()
	if err != nil {
		return fmt.Errorf("redis: delete api key: %w", err)
	}
	if n == 0 {
		return idkeeper.ErrNotFound
	}
	return nil
}

func decodeAPIKey(id, v string) (idkeeper.APIKey, error) {
	var r apiKeyRecord
	if err := json.Unmarshal([]byte(v), &r); err != nil {
		return idkeeper.APIKey{}, fmt.Errorf("redis: malformed api key %q: %w", id, err)
	}
	return idkeeper.APIKey{ID: id, Hash: r.Hash, Description: r.Description, CreatedAt: r.CreatedAt.UTC(), ExpiresAt: r.ExpiresAt.UTC()}, nil
}
