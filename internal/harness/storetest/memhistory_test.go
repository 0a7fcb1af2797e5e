package storetest

import (
	"cmp"
	"context"
	"maps"
	"slices"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/protocol"
)

// The memStore's lease history, straight from the doc of idkeeper.HistoryStore.

type histKey struct {
	node  idkeeper.NodeID
	token uint64
}

// histGrant records a new grant of l.
func (s *memStore) histGrant(l idkeeper.Lease, client idkeeper.ClientInfo) {
	client.Labels = maps.Clone(client.Labels)
	s.d.hist[histKey{l.NodeID, l.FencingToken}] = &idkeeper.HistoryRecord{NodeID: l.NodeID, Token: l.FencingToken,
		Requester: l.Requester, KeyID: l.KeyID, Client: client, GrantedAt: l.GrantedAt, NotBefore: l.NotBefore, WindowEnd: l.ExpiresAt}
}

// histExtend sets the window end of l's record to its ExpiresAt.
func (s *memStore) histExtend(l idkeeper.Lease) {
	if h := s.d.hist[histKey{l.NodeID, l.FencingToken}]; h != nil {
		h.WindowEnd = l.ExpiresAt
	}
}

// histEnd ends l's record.
func (s *memStore) histEnd(l idkeeper.Lease, end idkeeper.LeaseEnd, now time.Time) *idkeeper.HistoryRecord {
	h := s.d.hist[histKey{l.NodeID, l.FencingToken}]
	if h != nil {
		h.End, h.EndedAt = end, now
	}
	return h
}

// histClaim records a grant learned from a claim: restored (held again) or
// contested (ended at once).
func (s *memStore) histClaim(c idkeeper.Claim, r idkeeper.Requester, keyID string, now time.Time, l *idkeeper.Lease) {
	k := histKey{c.NodeID, c.Token}
	h := s.d.hist[k]
	if h == nil {
		h = &idkeeper.HistoryRecord{NodeID: c.NodeID, Token: c.Token, Requester: r, KeyID: keyID, GrantedAt: now,
			NotBefore: protocol.Millis(c.NotBefore), FromReceipt: true}
		s.d.hist[k] = h
	}
	if l != nil {
		h.WindowEnd, h.End, h.EndedAt, h.MintedUpTo = l.ExpiresAt, idkeeper.EndHeld, time.Time{}, time.Time{}
		return
	}
	h.WindowEnd, h.End, h.EndedAt, h.MintedUpTo = maxT(h.WindowEnd, protocol.Millis(c.ExpiresAt)), idkeeper.EndContested, now, time.Time{}
}

func (s *memStore) LeaseAt(_ context.Context, node idkeeper.NodeID, t time.Time) ([]idkeeper.HistoryRecord, error) {
	defer s.lock()()
	var out []idkeeper.HistoryRecord
	for k, h := range s.d.hist {
		if k.node == node && h.Holds(t) {
			out = append(out, cloneRecord(h))
		}
	}
	slices.SortFunc(out, func(a, b idkeeper.HistoryRecord) int { return cmp.Compare(a.Token, b.Token) })
	return out, nil
}

func (s *memStore) NodeHistory(_ context.Context, node idkeeper.NodeID, before uint64, limit int) ([]idkeeper.HistoryRecord, error) {
	if err := idkeeper.CheckHistoryLimit(limit, idkeeper.MaxHistoryPage); err != nil {
		return nil, err
	}
	defer s.lock()()
	var out []idkeeper.HistoryRecord
	for k, h := range s.d.hist {
		if k.node == node && (before == 0 || k.token < before) {
			out = append(out, cloneRecord(h))
		}
	}
	slices.SortFunc(out, func(a, b idkeeper.HistoryRecord) int { return cmp.Compare(b.Token, a.Token) })
	return out[:min(limit, len(out))], nil
}

func (s *memStore) PruneHistory(_ context.Context, before time.Time, limit int) (int, error) {
	if err := idkeeper.CheckHistoryLimit(limit, idkeeper.MaxHistoryPrune); err != nil {
		return 0, err
	}
	defer s.lock()()
	var ended []histKey
	for k, h := range s.d.hist {
		if h.End != idkeeper.EndHeld && h.EndedAt.Before(before) {
			ended = append(ended, k)
		}
	}
	slices.SortFunc(ended, func(a, b histKey) int {
		if c := s.d.hist[a].EndedAt.Compare(s.d.hist[b].EndedAt); c != 0 {
			return c
		}
		return cmp.Or(cmp.Compare(a.node, b.node), cmp.Compare(a.token, b.token))
	})
	ended = ended[:min(limit, len(ended))]
	for _, k := range ended {
		delete(s.d.hist, k)
	}
	return len(ended), nil
}

func (s *memStore) HistoryCount(context.Context) (int, error) {
	defer s.lock()()
	return len(s.d.hist), nil
}

func cloneRecord(h *idkeeper.HistoryRecord) idkeeper.HistoryRecord {
	c := *h
	c.Client.Labels = maps.Clone(h.Client.Labels)
	return c
}
