package storetest

import (
	"cmp"
	"context"
	"crypto/rand"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper"
)

// TestMemStore runs the suite against memStore, a naive reference implementation
// written straight from the doc comments of idkeeper.Store. It checks the suite
// itself: that it passes a store sharing no code or data model with bolt.
func TestMemStore(t *testing.T) {
	Run(t, func(t *testing.T, clock idkeeper.Clock) idkeeper.Store {
		return &memStore{clock: clock, d: newMemData()}
	})
}

type memStore struct {
	mu      sync.Mutex
	clock   idkeeper.Clock
	adopted string
	d       *memData
}

type memData struct {
	sentinel string
	nodes    []memNode
	fence    uint64
	seq      uint64 // free order
	locks    map[string]idkeeper.Lock
	keys     map[string]idkeeper.APIKey
	skews    map[string]memSkew
}

type memNode struct {
	lease *idkeeper.Lease
	wm, q time.Time
	freed uint64
}

type memSkew struct {
	o     idkeeper.SkewObservation
	until time.Time
}

func newMemData() *memData {
	return &memData{locks: map[string]idkeeper.Lock{}, keys: map[string]idkeeper.APIKey{}, skews: map[string]memSkew{}}
}

func (s *memStore) WipeForTest(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.d = newMemData()
	return nil
}

func (s *memStore) now() time.Time                         { return idkeeper.Millis(s.clock()) }
func (s *memStore) Now(context.Context) (time.Time, error) { return s.now(), nil }
func (s *memStore) Ping(context.Context) error             { return nil }
func (s *memStore) Close() error                           { return nil }

func (s *memStore) lock() func() {
	s.mu.Lock()
	return s.mu.Unlock
}

func (s *memStore) guard() error {
	if s.adopted == "" || s.d.sentinel != s.adopted {
		return idkeeper.ErrStoreReset
	}
	return nil
}

func (d *memData) grow(n int) {
	for len(d.nodes) < n {
		d.seq++
		d.nodes = append(d.nodes, memNode{freed: d.seq})
	}
}

func (s *memStore) Init(_ context.Context, n int) (idkeeper.InitResult, error) {
	defer s.lock()()
	if n < len(s.d.nodes) {
		return idkeeper.InitResult{}, idkeeper.Invalidf("nodes", "cannot shrink")
	}
	fresh := s.d.sentinel == ""
	if fresh {
		s.d.sentinel = rand.Text()
	}
	s.d.grow(n)
	s.adopted = s.d.sentinel
	return idkeeper.InitResult{Sentinel: s.d.sentinel, Fresh: fresh}, nil
}

func (s *memStore) Reset(_ context.Context, old string, p idkeeper.ResetParams) (string, bool, error) {
	defer s.lock()()
	s.d.fence = max(s.d.fence, p.MinFence)
	if s.d.sentinel != "" && s.d.sentinel != old {
		s.adopted = s.d.sentinel
		return s.d.sentinel, false, nil
	}
	s.d.grow(p.Nodes)
	until := idkeeper.Millis(p.Until)
	for i := range s.d.nodes {
		n := &s.d.nodes[i]
		n.q, n.wm = maxT(n.q, until), maxT(n.wm, until)
	}
	s.d.sentinel = rand.Text()
	s.adopted = s.d.sentinel
	return s.d.sentinel, true, nil
}

func (s *memStore) held(r idkeeper.Requester) []int {
	var ids []int
	for i, n := range s.d.nodes {
		if n.lease != nil && n.lease.Requester.Key() == r.Key() {
			ids = append(ids, i)
		}
	}
	return ids
}

func (s *memStore) grant(ids []int, now time.Time) idkeeper.Grant {
	g := idkeeper.Grant{Now: now, Fence: s.d.fence, Leases: []idkeeper.Lease{}}
	for _, i := range ids {
		g.Leases = append(g.Leases, *s.d.nodes[i].lease)
	}
	return g
}

func (s *memStore) Alloc(_ context.Context, r idkeeper.Requester, count int, first time.Duration) (idkeeper.Grant, error) {
	defer s.lock()()
	if err := s.guard(); err != nil {
		return idkeeper.Grant{}, err
	}
	now := s.now()
	if ids := s.held(r); len(ids) > 0 {
		if len(ids) != count {
			return idkeeper.Grant{}, &idkeeper.Error{Code: idkeeper.CodeRequesterCountMismatch, Message: "mismatch",
				Details: map[string]any{"held": len(ids), "requested": count}}
		}
		for _, i := range ids {
			n := &s.d.nodes[i]
			n.lease.ExpiresAt = maxT(n.lease.ExpiresAt, now.Add(first))
			n.wm = maxT(n.wm, n.lease.ExpiresAt)
		}
		return s.grant(ids, now), nil
	}
	var free []int
	for i, n := range s.d.nodes {
		if n.lease == nil && !n.q.After(now) {
			free = append(free, i)
		}
	}
	if len(free) < count {
		return idkeeper.Grant{}, &idkeeper.Error{Code: idkeeper.CodeNodeIDsExhausted, Message: "exhausted",
			Details: map[string]any{"requested": count, "remaining": len(free)}}
	}
	slices.SortFunc(free, func(a, b int) int {
		na, nb := s.d.nodes[a], s.d.nodes[b]
		ra, rb := na.wm.Before(now), nb.wm.Before(now)
		switch {
		case ra && !rb:
			return -1
		case rb && !ra:
			return 1
		case !ra:
			if c := na.wm.Compare(nb.wm); c != 0 {
				return c
			}
		}
		return cmp.Compare(na.freed, nb.freed)
	})
	ids := free[:count]
	for _, i := range ids {
		n := &s.d.nodes[i]
		s.d.fence++
		n.lease = &idkeeper.Lease{NodeID: idkeeper.NodeID(i), Requester: r, NotBefore: n.wm.Add(time.Millisecond),
			ExpiresAt: now.Add(first), FencingToken: s.d.fence, GrantedAt: now}
		n.wm = maxT(n.wm, n.lease.ExpiresAt)
	}
	slices.Sort(ids)
	return s.grant(ids, now), nil
}

func (s *memStore) Renew(_ context.Context, r idkeeper.Requester, d time.Duration) (idkeeper.Grant, error) {
	defer s.lock()()
	if err := s.guard(); err != nil {
		return idkeeper.Grant{}, err
	}
	now := s.now()
	ids := s.held(r)
	for _, i := range ids {
		n := &s.d.nodes[i]
		n.lease.ExpiresAt, n.lease.RenewedAt = maxT(n.lease.ExpiresAt, now.Add(d)), now
		n.wm = maxT(n.wm, n.lease.ExpiresAt)
	}
	return s.grant(ids, now), nil
}

func (s *memStore) free(n *memNode) {
	n.lease = nil
	s.d.seq++
	n.freed = s.d.seq
}

func (s *memStore) Remove(_ context.Context, r idkeeper.Requester, mintedUpTo time.Time) (int, error) {
	defer s.lock()()
	if err := s.guard(); err != nil {
		return 0, err
	}
	now := s.now()
	ids := s.held(r)
	for _, i := range ids {
		n := &s.d.nodes[i]
		if !mintedUpTo.IsZero() {
			wm := maxT(minT(idkeeper.Millis(mintedUpTo), n.lease.ExpiresAt), n.lease.NotBefore.Add(-time.Millisecond))
			if n.q.After(now) {
				wm = maxT(wm, n.q)
			}
			n.wm = wm
		}
		s.free(n)
	}
	return len(ids), nil
}

func (s *memStore) Reclaim(_ context.Context, grace time.Duration) (int, error) {
	defer s.lock()()
	if err := s.guard(); err != nil {
		return 0, err
	}
	now, count := s.now(), 0
	for i := range s.d.nodes {
		n := &s.d.nodes[i]
		if n.lease != nil && n.lease.ExpiresAt.Add(grace).Before(now) {
			s.free(n)
			count++
		}
	}
	return count, nil
}

func (s *memStore) Quarantine(_ context.Context, until time.Time, nodes ...idkeeper.NodeID) error {
	defer s.lock()()
	if err := s.guard(); err != nil {
		return err
	}
	for _, id := range nodes {
		if id < 0 || int(id) >= len(s.d.nodes) {
			return idkeeper.Invalidf("nodes", "node %d outside the pool", id)
		}
	}
	for _, id := range nodes {
		s.d.nodes[id].q = maxT(s.d.nodes[id].q, idkeeper.Millis(until))
	}
	return nil
}

func (s *memStore) Counts(context.Context) (idkeeper.Counts, error) {
	defer s.lock()()
	now := s.now()
	c := idkeeper.Counts{Total: len(s.d.nodes)}
	for _, n := range s.d.nodes {
		switch {
		case n.lease != nil && n.lease.Expired(now):
			c.InGrace++
		case n.lease != nil:
			c.Leased++
		case n.q.After(now):
			c.Quarantined++
		default:
			c.Remaining++
		}
	}
	return c, nil
}

func (s *memStore) Leases(context.Context) ([]idkeeper.Lease, error) {
	defer s.lock()()
	var out []idkeeper.Lease
	for _, n := range s.d.nodes {
		if n.lease != nil {
			out = append(out, *n.lease)
		}
	}
	return out, nil
}

func (s *memStore) Node(_ context.Context, id idkeeper.NodeID) (idkeeper.NodeState, error) {
	defer s.lock()()
	if id < 0 || int(id) >= len(s.d.nodes) {
		return idkeeper.NodeState{}, idkeeper.ErrNotFound
	}
	n := s.d.nodes[id]
	st := idkeeper.NodeState{NodeID: id, Watermark: n.wm, QuarantinedUntil: n.q}
	if n.lease != nil {
		l := *n.lease
		st.Lease = &l
	}
	return st, nil
}

func (s *memStore) TryLock(_ context.Context, name, owner string, atMostFor time.Duration) (idkeeper.Lock, bool, error) {
	defer s.lock()()
	now := s.now()
	if l, ok := s.d.locks[name]; ok && now.Before(l.Until) {
		return l, false, nil
	}
	l := idkeeper.Lock{Name: name, Owner: owner, LockedAt: now, Until: now.Add(atMostFor)}
	s.d.locks[name] = l
	return l, true, nil
}

func (s *memStore) Unlock(_ context.Context, name, owner string, atLeastFor time.Duration) (bool, error) {
	defer s.lock()()
	now := s.now()
	l, ok := s.d.locks[name]
	if !ok || l.Owner != owner || !now.Before(l.Until) {
		return false, nil
	}
	if keep := l.LockedAt.Add(atLeastFor); keep.After(now) {
		l.Until = keep
		s.d.locks[name] = l
	} else {
		delete(s.d.locks, name)
	}
	return true, nil
}

func (s *memStore) CreateAPIKey(_ context.Context, k idkeeper.APIKey) error {
	defer s.lock()()
	if _, ok := s.d.keys[k.ID]; ok {
		return idkeeper.ErrConflict
	}
	s.d.keys[k.ID] = k
	return nil
}

func (s *memStore) APIKey(_ context.Context, id string) (idkeeper.APIKey, error) {
	defer s.lock()()
	k, ok := s.d.keys[id]
	if !ok {
		return idkeeper.APIKey{}, idkeeper.ErrNotFound
	}
	return k, nil
}

func (s *memStore) APIKeys(context.Context) ([]idkeeper.APIKey, error) {
	defer s.lock()()
	var out []idkeeper.APIKey
	for _, k := range s.d.keys {
		out = append(out, k)
	}
	slices.SortFunc(out, func(a, b idkeeper.APIKey) int { return cmp.Compare(a.ID, b.ID) })
	return out, nil
}

func (s *memStore) DeleteAPIKey(_ context.Context, id string) error {
	defer s.lock()()
	if _, ok := s.d.keys[id]; !ok {
		return fmt.Errorf("delete %q: %w", id, idkeeper.ErrNotFound)
	}
	delete(s.d.keys, id)
	return nil
}

func (s *memStore) RecordSkew(_ context.Context, o idkeeper.SkewObservation, ttl time.Duration) error {
	defer s.lock()()
	s.d.skews[o.Requester.Key()] = memSkew{o: o, until: s.now().Add(ttl)}
	return nil
}

func (s *memStore) SkewObservations(context.Context) ([]idkeeper.SkewObservation, error) {
	defer s.lock()()
	now := s.now()
	var keys []string
	for k, v := range s.d.skews {
		if !now.Before(v.until) {
			delete(s.d.skews, k)
			continue
		}
		keys = append(keys, k)
	}
	slices.Sort(keys)
	out := make([]idkeeper.SkewObservation, len(keys))
	for i, k := range keys {
		out[i] = s.d.skews[k].o
	}
	return out, nil
}

func maxT(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func minT(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
