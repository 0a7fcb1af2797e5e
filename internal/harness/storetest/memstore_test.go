package storetest

import (
	"cmp"
	"context"
	"crypto/rand"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/protocol"
)

// The wipe cases skip a store that is not a Wiper: the reference store must stay one.
var _ Wiper = (*memStore)(nil)

// TestMemStore runs the suite against memStore, a naive reference implementation
// written straight from the doc comments of idkeeper.Store. It checks the suite
// itself: that it passes a store sharing no code or data model with bolt.
func TestMemStore(t *testing.T) {
	Run(t, func(t *testing.T, clock idkeeper.Clock) idkeeper.Store {
		return &memStore{clock: clock, d: newMemData()}
	})
}

type memStore struct {
	mu    sync.Mutex
	clock idkeeper.Clock
	d     *memData
}

type memData struct {
	gen   idkeeper.Generation // zero: not initialised
	first idkeeper.NodeID     // nodes[i] is node ID first+i
	lay   idkeeper.Layout     // the pool's layout, set with its first node
	nodes []memNode
	fence uint64
	seq   uint64 // free order
	locks map[string]idkeeper.Lock
	keys  map[string]idkeeper.APIKey
	skews map[string]memSkew
	hist  map[histKey]*idkeeper.HistoryRecord
}

type memNode struct {
	lease          *idkeeper.Lease
	wm, floor, q   time.Time
	freed, lastTok uint64
	restorable     bool
	// coolKey is the API key a Remove charged the node's cooling to, until
	// coolUntil (inclusive); "" when none. A grant or restore ends it.
	coolKey   string
	coolUntil time.Time
}

// cooling is whether the node counts against keyID's quota at now.
func (n memNode) cooling(keyID string, now time.Time) bool {
	return n.lease == nil && n.coolKey == keyID && !n.coolUntil.Before(now)
}

// fenced is the node's effective watermark.
func (n memNode) fenced() time.Time { return maxT(n.wm, n.floor) }

type memSkew struct {
	o     idkeeper.SkewObservation
	until time.Time
}

func newMemData() *memData {
	return &memData{locks: map[string]idkeeper.Lock{}, keys: map[string]idkeeper.APIKey{}, skews: map[string]memSkew{},
		hist: map[histKey]*idkeeper.HistoryRecord{}}
}

func (s *memStore) WipeForTest(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.d = newMemData()
	return nil
}

func (s *memStore) now() time.Time                         { return protocol.Millis(s.clock()) }
func (s *memStore) Now(context.Context) (time.Time, error) { return s.now(), nil }
func (s *memStore) Ping(context.Context) error             { return nil }
func (s *memStore) Close() error                           { return nil }

func (s *memStore) lock() func() {
	s.mu.Lock()
	return s.mu.Unlock
}

func (s *memStore) guard(g idkeeper.Guard) error {
	return g.Check(s.d.gen.ID, s.d.fence, s.now())
}

func (d *memData) grow(n int) {
	for len(d.nodes) < n {
		d.seq++
		d.nodes = append(d.nodes, memNode{freed: d.seq})
	}
}

func (s *memStore) Status(context.Context) (idkeeper.StoreStatus, error) {
	defer s.lock()()
	return idkeeper.StoreStatus{Initialised: !s.d.gen.IsZero(), Generation: s.d.gen, Fence: s.d.fence,
		Pool: s.d.pool(), Now: s.now()}, nil
}

func (s *memStore) Init(_ context.Context, p idkeeper.PoolSpec) (idkeeper.InitResult, error) {
	defer s.lock()()
	if err := p.Validate(); err != nil {
		return idkeeper.InitResult{}, err
	}
	if err := s.d.adopt(p, false); err != nil {
		return idkeeper.InitResult{}, err
	}
	fresh := s.d.gen.IsZero()
	if fresh {
		s.d.gen = idkeeper.Generation{ID: rand.Text(), Number: 1, Origin: idkeeper.OriginFresh, At: s.now()}
	}
	s.d.grow(p.Nodes)
	return idkeeper.InitResult{Generation: s.d.gen, Fresh: fresh}, nil
}

func (s *memStore) Grow(_ context.Context, g idkeeper.Guard, p idkeeper.PoolSpec) error {
	defer s.lock()()
	if err := p.Validate(); err != nil {
		return err
	}
	if err := s.guard(g); err != nil {
		return err
	}
	if err := s.d.adopt(p, false); err != nil {
		return err
	}
	s.d.grow(p.Nodes)
	return nil
}

func (s *memStore) Reset(_ context.Context, p idkeeper.ResetParams) (idkeeper.ResetResult, error) {
	defer s.lock()()
	if err := p.Validate(); err != nil {
		return idkeeper.ResetResult{}, err
	}
	if err := s.d.adopt(p.Pool, true); err != nil {
		return idkeeper.ResetResult{}, err
	}
	s.d.fence = max(s.d.fence, p.MinFence)
	s.d.grow(p.Pool.Nodes)
	until := protocol.Millis(p.Until)
	for i := range s.d.nodes {
		n := &s.d.nodes[i]
		n.q, n.floor, n.restorable = maxT(n.q, until), maxT(n.floor, until), true
	}
	now := s.now()
	if s.d.gen.IsZero() || s.d.gen.ID == p.Seen.ID {
		s.d.gen = idkeeper.Generation{ID: rand.Text(), Number: max(s.d.gen.Number, p.Seen.Number) + 1,
			Origin: idkeeper.OriginRecovered, At: now}
		return idkeeper.ResetResult{Generation: s.d.gen, NewGeneration: true}, nil
	}
	s.d.gen.Origin, s.d.gen.At = idkeeper.OriginRecovered, now
	return idkeeper.ResetResult{Generation: s.d.gen}, nil
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

// owned returns the node IDs r holds, or LEASE_NOT_OWNED when one of them
// belongs to another key.
func (s *memStore) owned(r idkeeper.Requester, keyID string) ([]int, error) {
	ids := s.held(r)
	for _, i := range ids {
		if s.d.nodes[i].lease.KeyID != keyID {
			return nil, idkeeper.NotOwned()
		}
	}
	return ids, nil
}

func (s *memStore) keyHeld(keyID string) int {
	n := 0
	for _, nd := range s.d.nodes {
		if nd.lease != nil && nd.lease.KeyID == keyID {
			n++
		}
	}
	return n
}

func (s *memStore) grant(ids []int, now time.Time) idkeeper.Grant {
	g := idkeeper.Grant{Now: now, Fence: s.d.fence, Leases: []idkeeper.Lease{}}
	for _, i := range ids {
		g.Leases = append(g.Leases, *s.d.nodes[i].lease)
	}
	return g
}

func (s *memStore) Alloc(_ context.Context, g idkeeper.Guard, p idkeeper.AllocParams) (idkeeper.Grant, error) {
	defer s.lock()()
	if err := p.Validate(); err != nil {
		return idkeeper.Grant{}, err
	}
	if err := s.guard(g); err != nil {
		return idkeeper.Grant{}, err
	}
	now := s.now()
	ids, err := s.owned(p.Requester, p.KeyID)
	if err != nil {
		return idkeeper.Grant{}, err
	}
	if len(ids) > 0 {
		if len(ids) != p.Count {
			return idkeeper.Grant{}, idkeeper.CountMismatch(len(ids), p.Count)
		}
		for _, i := range ids {
			n := &s.d.nodes[i]
			n.lease.ExpiresAt = maxT(n.lease.ExpiresAt, now.Add(p.First))
			n.wm = maxT(n.wm, n.lease.ExpiresAt)
			s.histExtend(*n.lease)
		}
		return s.grant(ids, now), nil
	}
	if p.MaxNodes > 0 {
		cool := s.keyCooling(p.KeyID, now)
		if held := s.keyHeld(p.KeyID) + cool; held+p.Count > p.MaxNodes {
			return idkeeper.Grant{}, idkeeper.QuotaExceededCooling(p.MaxNodes, held, cool, p.Count)
		}
	}
	var free []int
	for i, n := range s.d.nodes {
		if n.lease == nil && !n.q.After(now) {
			free = append(free, i)
		}
	}
	if len(free) < p.Count {
		return idkeeper.Grant{}, idkeeper.Exhausted(p.Count, len(free))
	}
	if s.d.fence+uint64(p.Count) > idkeeper.MaxFencingToken {
		return idkeeper.Grant{}, fmt.Errorf("the fencing counter is exhausted")
	}
	slices.SortFunc(free, func(a, b int) int {
		wa, wb := s.d.nodes[a].fenced(), s.d.nodes[b].fenced()
		ra, rb := wa.Before(now), wb.Before(now)
		switch {
		case ra && !rb:
			return -1
		case rb && !ra:
			return 1
		case !ra:
			if c := wa.Compare(wb); c != 0 {
				return c
			}
		}
		return cmp.Compare(s.d.nodes[a].freed, s.d.nodes[b].freed)
	})
	ids = free[:p.Count]
	for _, i := range ids {
		n := &s.d.nodes[i]
		s.d.fence++
		n.lease = &idkeeper.Lease{NodeID: s.d.first + idkeeper.NodeID(i), Requester: p.Requester, NotBefore: n.fenced().Add(time.Millisecond),
			ExpiresAt: now.Add(p.First), FencingToken: s.d.fence, GrantedAt: now, KeyID: p.KeyID}
		n.wm, n.lastTok, n.restorable = maxT(n.wm, n.lease.ExpiresAt), s.d.fence, false
		n.coolKey, n.coolUntil = "", time.Time{}
		s.histGrant(*n.lease, p.Client)
	}
	slices.Sort(ids)
	return s.grant(ids, now), nil
}

func (s *memStore) Renew(_ context.Context, g idkeeper.Guard, p idkeeper.RenewParams) (idkeeper.Grant, error) {
	defer s.lock()()
	if err := p.Validate(); err != nil {
		return idkeeper.Grant{}, err
	}
	if err := s.guard(g); err != nil {
		return idkeeper.Grant{}, err
	}
	if _, err := s.owned(p.Requester, p.KeyID); err != nil {
		return idkeeper.Grant{}, err
	}
	now := s.now()
	claims := slices.Clone(p.Claims)
	slices.SortFunc(claims, func(a, b idkeeper.Claim) int { return cmp.Compare(a.NodeID, b.NodeID) })
	var restored, contested []idkeeper.NodeID
	for _, c := range claims {
		ci, in := s.d.index(c.NodeID)
		if !c.Possible() || !in || protocol.Millis(c.ExpiresAt).Before(now) {
			continue
		}
		n := &s.d.nodes[ci]
		if c.Token <= n.lastTok || (n.lease != nil && n.lease.Requester.Key() == p.Requester.Key()) {
			continue
		}
		if n.lease != nil {
			n.wm = maxT(n.wm, maxT(n.lease.ExpiresAt, protocol.Millis(c.ExpiresAt)))
			n.q = maxT(n.q, n.wm.Add(p.Grace))
			n.lastTok, n.restorable = c.Token, false
			s.histEnd(*n.lease, idkeeper.EndContested, now)
			s.histClaim(c, p.Requester, p.KeyID, now, nil)
			s.free(n)
			contested = append(contested, c.NodeID)
			continue
		}
		if !n.restorable {
			continue
		}
		exp := maxT(protocol.Millis(c.ExpiresAt), now.Add(p.Duration))
		n.lease = &idkeeper.Lease{NodeID: c.NodeID, Requester: p.Requester, KeyID: p.KeyID, FencingToken: c.Token,
			NotBefore: maxT(protocol.Millis(c.NotBefore), n.wm.Add(time.Millisecond)), ExpiresAt: exp, GrantedAt: now}
		n.wm, n.lastTok, n.restorable = maxT(n.wm, exp), c.Token, false
		n.coolKey, n.coolUntil = "", time.Time{}
		s.histClaim(c, p.Requester, p.KeyID, now, n.lease)
		restored = append(restored, c.NodeID)
	}
	ids := s.held(p.Requester)
	for _, i := range ids {
		n := &s.d.nodes[i]
		n.lease.ExpiresAt, n.lease.RenewedAt = maxT(n.lease.ExpiresAt, now.Add(p.Duration)), now
		n.wm = maxT(n.wm, n.lease.ExpiresAt)
		s.histExtend(*n.lease)
	}
	gr := s.grant(ids, now)
	gr.Restored, gr.Contested = restored, contested
	return gr, nil
}

func (s *memStore) free(n *memNode) {
	n.lease = nil
	s.d.seq++
	n.freed = s.d.seq
}

func (s *memStore) Remove(_ context.Context, g idkeeper.Guard, p idkeeper.RemoveParams) (int, error) {
	defer s.lock()()
	if err := p.Validate(); err != nil {
		return 0, err
	}
	if err := s.guard(g); err != nil {
		return 0, err
	}
	ids, err := s.owned(p.Requester, p.KeyID)
	if err != nil {
		return 0, err
	}
	now := s.now()
	for _, i := range ids {
		n := &s.d.nodes[i]
		h := s.histEnd(*n.lease, idkeeper.EndRemoved, now)
		if !p.MintedUpTo.IsZero() {
			wm := maxT(minT(protocol.Millis(p.MintedUpTo), n.lease.ExpiresAt), n.lease.NotBefore.Add(-time.Millisecond))
			if h != nil {
				h.WindowEnd, h.MintedUpTo = wm, protocol.Millis(p.MintedUpTo)
			}
			if n.q.After(now) {
				wm = maxT(wm, n.q)
			}
			n.wm = wm
		}
		s.free(n)
		n.coolKey, n.coolUntil = "", time.Time{}
		if w := n.fenced(); !w.Before(now) {
			n.coolKey, n.coolUntil = p.KeyID, w
		}
	}
	return len(ids), nil
}

func (s *memStore) Reclaim(_ context.Context, g idkeeper.Guard, grace time.Duration) (int, error) {
	defer s.lock()()
	if err := s.guard(g); err != nil {
		return 0, err
	}
	now, count := s.now(), 0
	for i := range s.d.nodes {
		n := &s.d.nodes[i]
		if n.lease != nil && n.lease.ExpiresAt.Add(grace).Before(now) {
			s.histEnd(*n.lease, idkeeper.EndReclaimed, now)
			s.free(n)
			count++
		}
	}
	return count, nil
}

func (s *memStore) Quarantine(_ context.Context, g idkeeper.Guard, until time.Time, nodes ...idkeeper.NodeID) error {
	defer s.lock()()
	if err := s.guard(g); err != nil {
		return err
	}
	for _, id := range nodes {
		if _, in := s.d.index(id); !in {
			return idkeeper.OutsidePool(id)
		}
	}
	for _, id := range nodes {
		i, _ := s.d.index(id)
		s.d.nodes[i].q = maxT(s.d.nodes[i].q, protocol.Millis(until))
	}
	return nil
}

func (s *memStore) RevokeLease(_ context.Context, g idkeeper.Guard, node idkeeper.NodeID, token uint64, grace time.Duration) (idkeeper.Lease, error) {
	defer s.lock()()
	if err := idkeeper.CheckGrace(grace); err != nil {
		return idkeeper.Lease{}, err
	}
	if err := s.guard(g); err != nil {
		return idkeeper.Lease{}, err
	}
	i, in := s.d.index(node)
	if !in {
		return idkeeper.Lease{}, idkeeper.ErrNotFound
	}
	n := &s.d.nodes[i]
	if n.lease == nil || n.lease.FencingToken != token {
		return idkeeper.Lease{}, idkeeper.ErrNotFound
	}
	l := *n.lease
	n.wm = maxT(n.wm, l.ExpiresAt)
	n.q = maxT(n.q, protocol.Millis(l.ExpiresAt.Add(grace)))
	n.restorable = false
	s.histEnd(l, idkeeper.EndRevoked, s.now())
	s.free(n)
	return l, nil
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
			if w := n.fenced(); !w.Before(now) {
				if c.Cooling == 0 || w.Add(time.Millisecond).Before(c.NextReadyAt) {
					c.NextReadyAt = w.Add(time.Millisecond)
				}
				c.Cooling++
			}
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
	i, in := s.d.index(id)
	if !in {
		return idkeeper.NodeState{}, idkeeper.ErrNotFound
	}
	n := s.d.nodes[i]
	st := idkeeper.NodeState{NodeID: id, Watermark: n.wm, Floor: n.floor, QuarantinedUntil: n.q,
		LastToken: n.lastTok, Restorable: n.restorable}
	if n.lease != nil {
		l := *n.lease
		st.Lease = &l
	}
	return st, nil
}

func (s *memStore) KeyHoldings(context.Context) (map[string]int, error) {
	defer s.lock()()
	out := map[string]int{}
	for _, n := range s.d.nodes {
		if n.lease != nil {
			out[n.lease.KeyID]++
		}
	}
	return out, nil
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

func (s *memStore) Locks(context.Context) ([]idkeeper.Lock, error) {
	defer s.lock()()
	now := s.now()
	out := []idkeeper.Lock{}
	for _, l := range s.d.locks {
		if now.Before(l.Until) {
			out = append(out, l)
		}
	}
	slices.SortFunc(out, func(a, b idkeeper.Lock) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

func (s *memStore) CreateAPIKey(_ context.Context, k idkeeper.APIKey) error {
	defer s.lock()()
	if _, ok := s.d.keys[k.ID]; ok {
		return idkeeper.ErrConflict
	}
	k.CreatedAt, k.ExpiresAt = protocol.Millis(k.CreatedAt), protocol.Millis(k.ExpiresAt)
	k.RevokedAt, k.LastUsedAt = protocol.Millis(k.RevokedAt), protocol.Millis(k.LastUsedAt)
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

func (s *memStore) RevokeAPIKey(_ context.Context, id string, at time.Time) error {
	defer s.lock()()
	k, ok := s.d.keys[id]
	if !ok {
		return fmt.Errorf("revoke %q: %w", id, idkeeper.ErrNotFound)
	}
	if k.RevokedAt.IsZero() {
		k.RevokedAt = protocol.Millis(at)
		s.d.keys[id] = k
	}
	return nil
}

func (s *memStore) TouchAPIKey(_ context.Context, id string, at time.Time) error {
	defer s.lock()()
	if k, ok := s.d.keys[id]; ok && protocol.Millis(at).After(k.LastUsedAt) {
		k.LastUsedAt = protocol.Millis(at)
		s.d.keys[id] = k
	}
	return nil
}

func (s *memStore) UpdateAPIKey(_ context.Context, id string, u idkeeper.KeyUpdate) (idkeeper.APIKey, error) {
	defer s.lock()()
	k, ok := s.d.keys[id]
	switch {
	case !ok:
		return idkeeper.APIKey{}, fmt.Errorf("update %q: %w", id, idkeeper.ErrNotFound)
	case k.Revoked():
		return idkeeper.APIKey{}, fmt.Errorf("update %q: %w", id, idkeeper.ErrConflict)
	}
	if u.ExpiresAt != nil {
		k.ExpiresAt = protocol.Millis(*u.ExpiresAt)
	}
	if u.MaxNodes != nil {
		k.MaxNodes = *u.MaxNodes
	}
	s.d.keys[id] = k
	return k, nil
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
