package etcd

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// WipeForTest deletes every key under the store's prefix, generation included,
// as the loss of a cluster's data would: the storetest.Wiper hook. It exists in
// test builds only.
func (s *Store) WipeForTest(ctx context.Context) error {
	_, err := s.c.Delete(ctx, s.k.prefix, clientv3.WithPrefix())
	return err
}

// ConflictsForTest is how many lease-transaction attempts of s lost to another
// writer and started over.
func (s *Store) ConflictsForTest() int64 { return s.conflicts.Load() }

// CheckForTest reads every key of the store and reports the first way in which the
// keys disagree with one another: an index entry that does not hold its node's
// record, a node without its entry, an entry without its node, a counter of the
// meta record that does not count its index, a requester index or a key count
// that does not match the leases.
func (s *Store) CheckForTest(ctx context.Context) error {
	resp, err := s.c.Get(ctx, s.k.prefix, clientv3.WithPrefix())
	if err != nil {
		return err
	}
	all := map[string]string{}
	for _, e := range resp.Kvs {
		all[string(e.Key)] = string(e.Value)
	}
	m := meta{}
	if v, ok := all[s.k.meta]; ok {
		if m, err = decodeMeta([]byte(v)); err != nil {
			return err
		}
	}
	entries := map[string]bool{}
	for k := range all {
		for _, idx := range []string{s.k.expiry, s.k.ready, s.k.cooling, s.k.quar} {
			if strings.HasPrefix(k, idx) {
				entries[k] = true
			}
		}
	}
	var held, quar, cooling uint64
	reqs := map[string]holding{}
	keyHeld := map[string]int{}
	for id := uint32(m.First); uint64(id) < m.end(); id++ {
		v, ok := all[s.k.nodeKey(id)]
		if !ok {
			return fmt.Errorf("node %d of %d has no record", id, m.Nodes)
		}
		r, err := decodeNode([]byte(v))
		if err != nil {
			return err
		}
		e := s.k.entry(id, r)
		if r.place == placeReady && r.freeSeq < m.ReadyFrom {
			return fmt.Errorf("node %d: ready at free sequence %d, below ReadyFrom %d", id, r.freeSeq, m.ReadyFrom)
		}
		if all[e] != v {
			return fmt.Errorf("node %d: its entry %q does not hold its record", id, e)
		}
		delete(entries, e)
		switch r.place {
		case placeHeld:
			held++
			h := reqs[r.lease.Requester]
			h.KeyID = r.lease.KeyID
			reqs[r.lease.Requester] = h.With(id, r.lease.Token)
			keyHeld[r.lease.KeyID]++
		case placeQuarantine:
			quar++
		case placeCooling:
			cooling++
		}
	}
	for e := range entries {
		return fmt.Errorf("index entry %q belongs to no node", e)
	}
	if held != m.Held || quar != m.Quarantined || cooling != m.Cooling {
		return fmt.Errorf("counters held %d, quarantined %d, cooling %d; the records say %d, %d, %d",
			m.Held, m.Quarantined, m.Cooling, held, quar, cooling)
	}
	for k, v := range all {
		switch {
		case strings.HasPrefix(k, s.k.req):
			want, ok := reqs[strings.TrimPrefix(k, s.k.req)]
			if !ok || encodeHolding(want) != v {
				return fmt.Errorf("requester index %q = %q, the leases say %q", k, v, encodeHolding(want))
			}
			delete(reqs, strings.TrimPrefix(k, s.k.req))
		case strings.HasPrefix(k, s.k.keyHeld):
			if n := keyHeld[strings.TrimPrefix(k, s.k.keyHeld)]; strconv.Itoa(n) != v {
				return fmt.Errorf("key count %q = %s, the leases say %d", k, v, n)
			}
			delete(keyHeld, strings.TrimPrefix(k, s.k.keyHeld))
		}
	}
	if len(reqs) != 0 || len(keyHeld) != 0 {
		return fmt.Errorf("leases of requesters %v, keys %v missing from their indexes", reqs, keyHeld)
	}
	return nil
}

// SetReadyFromForTest sets where the Store believes the ready index starts, as
// another Store's writes would leave it.
func (s *Store) SetReadyFromForTest(v uint64) { s.readyFrom.Store(v) }

// SetBeforeCommitForTest makes fn run before each lease commit of s.
func (s *Store) SetBeforeCommitForTest(fn func()) { s.beforeCommit = fn }

// SetLoadBatchForTest makes LoadSnapshot stage n keys a transaction.
func (s *Store) SetLoadBatchForTest(n int) { s.loadBatch = n }

// StagingKeysForTest counts the keys under the staging prefix.
func (s *Store) StagingKeysForTest(ctx context.Context) (int64, error) {
	resp, err := s.c.Get(ctx, s.k.staging, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return 0, err
	}
	return resp.Count, nil
}
