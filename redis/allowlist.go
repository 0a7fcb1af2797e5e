package redis

import (
	"context"
	"fmt"
	"net/netip"
	"slices"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/allowlist"
	"github.com/idkeeper/idkeeper/protocol"
)

// allowRecord is the JSON of one allow-list entry in the allowlist hash, keyed by
// its masked prefix (netip.Prefix.String).
type allowRecord struct {
	Note      string `json:"note,omitempty"`
	CreatedBy string `json:"createdBy,omitempty"`
	CreatedAt int64  `json:"createdAt"`
}

// AddAllowEntry stores e, its Prefix masked; ErrConflict when that prefix is
// listed already. An invalid prefix is an INVALID_REQUEST error.
func (s *Store) AddAllowEntry(ctx context.Context, e allowlist.Entry) error {
	if !e.Prefix.IsValid() {
		return protocol.Invalidf("prefix", "an allow-list entry needs a valid IP prefix")
	}
	rec, err := encodeRecord("allow entry", allowRecord{Note: e.Note, CreatedBy: e.CreatedBy, CreatedAt: ms(e.CreatedAt)})
	if err != nil {
		return err
	}
	added, err := s.client.HSetNX(ctx, s.adminKey(keyAllowList), e.Prefix.Masked().String(), rec).Result()
	if err != nil {
		return fmt.Errorf("redis: add allow entry: %w", err)
	}
	if !added {
		return idkeeper.ErrConflict
	}
	return nil
}

// RemoveAllowEntry deletes the entry of that prefix (masked first); ErrNotFound
// when there is none. An invalid prefix is an INVALID_REQUEST error.
func (s *Store) RemoveAllowEntry(ctx context.Context, p netip.Prefix) error {
	if !p.IsValid() {
		return protocol.Invalidf("prefix", "an allow-list entry needs a valid IP prefix")
	}
	n, err := s.client.HDel(ctx, s.adminKey(keyAllowList), p.Masked().String()).Result()
	if err != nil {
		return fmt.Errorf("redis: remove allow entry: %w", err)
	}
	if n == 0 {
		return idkeeper.ErrNotFound
	}
	return nil
}

// AllowEntries returns every entry, sorted by address then prefix length
// (netip.Prefix.Compare: IPv4 before IPv6): one HGETALL, sorted in Go.
func (s *Store) AllowEntries(ctx context.Context) ([]allowlist.Entry, error) {
	m, err := s.client.HGetAll(ctx, s.adminKey(keyAllowList)).Result()
	if err != nil {
		return nil, fmt.Errorf("redis: allow entries: %w", err)
	}
	out := make([]allowlist.Entry, 0, len(m))
	for field, rec := range m {
		p, err := netip.ParsePrefix(field)
		if err != nil || p != p.Masked() {
			return nil, fmt.Errorf("redis: malformed allow entry %q: not a masked prefix", field)
		}
		var r allowRecord
		if err := decodeRecord("allow entry", field, rec, &r); err != nil {
			return nil, err
		}
		out = append(out, allowlist.Entry{Prefix: p, Note: r.Note, CreatedBy: r.CreatedBy, CreatedAt: fromMs(r.CreatedAt)})
	}
	slices.SortFunc(out, func(a, b allowlist.Entry) int { return a.Prefix.Compare(b.Prefix) })
	return out, nil
}
