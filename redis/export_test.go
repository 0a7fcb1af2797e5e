package redis

import (
	"context"
	"fmt"
	"strings"
)

// WipeForTest deletes every key of the store's prefix, generation included: what a
// Redis restart without persistence does, for the contract suite's reset tests.
func (s *Store) WipeForTest(ctx context.Context) error {
	pattern := globEscape(strings.TrimSuffix(s.keys.meta, "meta")) + "*"
	iter := s.client.Scan(ctx, 0, pattern, 1000).Iterator()
	var batch []string
	for iter.Next(ctx) {
		batch = append(batch, iter.Val())
	}
	if err := iter.Err(); err != nil {
		return fmt.Errorf("redis: wipe: %w", err)
	}
	if len(batch) == 0 {
		return nil
	}
	return s.client.Del(ctx, batch...).Err()
}

// KeysForTest are the store's key names, for tests that check their hash tags.
func (s *Store) KeysForTest() []string {
	k := s.keys
	return append(append([]string{}, k.lease...), k.locks, k.apiKeys, k.skewIndex, k.skewPrefix)
}

func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}
