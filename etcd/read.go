package etcd

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/idkeeper/idkeeper"
)

// Counts implements idkeeper.LeaseStore: one read transaction, O(log n + k), k
// being the expired leases not yet reclaimed plus the ended quarantines and passed
// cooling watermarks not yet moved. It takes the counters with counts of those
// index ranges (etcd counts keys in its index) and the entries of the ended
// quarantines, whose records tell cooling from ready.
func (s *Store) Counts(ctx context.Context) (idkeeper.Counts, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	k := s.k
	now := s.nowMs()
	resp, err := s.view(ctx, clientv3.OpGet(k.meta),
		clientv3.OpGet(k.expiry, clientv3.WithRange(before(k.expiry, now)), clientv3.WithCountOnly()),
		clientv3.OpGet(k.quar, clientv3.WithRange(before(k.quar, now+1))),
		clientv3.OpGet(k.cooling, clientv3.WithRange(before(k.cooling, now)), clientv3.WithCountOnly()),
		clientv3.OpGet(before(k.cooling, now), clientv3.WithRange(clientv3.GetPrefixRangeEnd(k.cooling)),
			clientv3.WithLimit(1), clientv3.WithKeysOnly()))
	if err != nil {
		return idkeeper.Counts{}, wrap("counts", err)
	}
	m := meta{Version: schemaVersion}
	if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) == 1 {
		if m, err = decodeMeta(kvs[0].Value); err != nil {
			return idkeeper.Counts{}, err
		}
	}
	inGrace := int(resp.Responses[1].GetResponseRange().Count)
	ended := resp.Responses[2].GetResponseRange().Kvs
	passed := int(resp.Responses[3].GetResponseRange().Count)
	quarantined := int(m.Quarantined) - len(ended)
	cooling := int(m.Cooling) - passed
	next := int64(0)
	if kvs := resp.Responses[4].GetResponseRange().Kvs; len(kvs) == 1 {
		if next, err = indexTime(k.cooling, string(kvs[0].Key)); err != nil {
			return idkeeper.Counts{}, err
		}
	}
	// A node whose quarantine has ended is ready or cooling, as its watermark says.
	for _, e := range ended {
		r, err := decodeNode(e.Value)
		if err != nil {
			return idkeeper.Counts{}, fmt.Errorf("etcd: %s: %w", e.Key, err)
		}
		if w := r.fenced(); w >= now {
			if cooling == 0 || w < next {
				next = w
			}
			cooling++
		}
	}
	c := idkeeper.Counts{Total: int(m.Nodes), Remaining: int(m.Nodes) - int(m.Held) - quarantined, Cooling: cooling,
		Leased: int(m.Held) - inGrace, InGrace: inGrace, Quarantined: quarantined}
	if cooling > 0 {
		c.NextReadyAt = msTime(next + 1)
	}
	return c, nil
}

// Leases implements idkeeper.LeaseStore: one range read of the node records, which
// hold the leases.
func (s *Store) Leases(ctx context.Context) ([]idkeeper.Lease, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	resp, err := s.c.Get(ctx, s.k.node, clientv3.WithPrefix())
	if err != nil {
		return nil, wrap("leases", err)
	}
	out := []idkeeper.Lease{}
	for _, e := range resp.Kvs {
		r, err := decodeNode(e.Value)
		if err != nil {
			return nil, err
		}
		if r.lease == nil {
			continue
		}
		id, err := indexID(string(e.Key))
		if err != nil {
			return nil, err
		}
		l, err := r.lease.On(id)
		if err != nil {
			return nil, err
		}
		out = append(out, l)
	}
	return out, nil
}

// Node implements idkeeper.LeaseStore.
func (s *Store) Node(ctx context.Context, id idkeeper.NodeID) (idkeeper.NodeState, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	if id < 0 || int64(id) > int64(^uint32(0)) {
		return idkeeper.NodeState{}, idkeeper.ErrNotFound
	}
	resp, err := s.view(ctx, clientv3.OpGet(s.k.meta), clientv3.OpGet(s.k.nodeKey(uint32(id))))
	if err != nil {
		return idkeeper.NodeState{}, wrap("node", err)
	}
	m := meta{Version: schemaVersion}
	if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) == 1 {
		if m, err = decodeMeta(kvs[0].Value); err != nil {
			return idkeeper.NodeState{}, err
		}
	}
	kvs := resp.Responses[1].GetResponseRange().Kvs
	if !m.inPool(id) {
		return idkeeper.NodeState{}, idkeeper.ErrNotFound
	}
	if len(kvs) != 1 {
		return idkeeper.NodeState{}, fmt.Errorf("etcd: node %d of a pool of %d has no record", id, m.Nodes)
	}
	r, err := decodeNode(kvs[0].Value)
	if err != nil {
		return idkeeper.NodeState{}, err
	}
	return r.state(uint32(id))
}

// KeyHoldings implements idkeeper.LeaseStore: one range read of the per-key counts.
func (s *Store) KeyHoldings(ctx context.Context) (map[string]int, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	resp, err := s.c.Get(ctx, s.k.keyHeld, clientv3.WithPrefix())
	if err != nil {
		return nil, wrap("key holdings", err)
	}
	out := map[string]int{}
	for _, e := range resp.Kvs {
		n, err := strconv.Atoi(string(e.Value))
		if err != nil {
			return nil, fmt.Errorf("etcd: corrupt count under %q: %w", e.Key, err)
		}
		out[strings.TrimPrefix(string(e.Key), s.k.keyHeld)] = n
	}
	return out, nil
}
