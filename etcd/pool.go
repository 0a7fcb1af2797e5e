package etcd

import (
	"context"
	"fmt"
	"slices"
	"strconv"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/internal/leasetx"
	"github.com/idkeeper/idkeeper/snapshot"
)

// The node pool inside a transaction: node records, the free indexes and the
// counters of the meta record, kept in step as bolt keeps its buckets.

func (t *txn) node(id uint32) (nodeRec, error) {
	v, ok, err := t.get(t.s.k.nodeKey(id))
	if err != nil {
		return nodeRec{}, err
	}
	if !ok {
		return nodeRec{}, fmt.Errorf("node %d of a pool of %d has no record", id, t.meta.Nodes)
	}
	return decodeNode(v)
}

// putNode stores a node's record under its key and, the same bytes, under its
// index entry: the expiry entry while held, else the entry of its free index. Every
// record is written through here, so an index entry always holds its node's
// record, and a range read of an index reads the records with it.
func (t *txn) putNode(id uint32, r nodeRec) {
	if r.place == placeReady {
		t.meta.ReadyFrom = min(t.meta.ReadyFrom, r.freeSeq)
	}
	v := r.encode()
	t.put(t.s.k.nodeKey(id), v)
	t.put(t.s.k.entry(id, r), v)
}

// cacheEntries takes the records that the index entries of scan i (read with
// their values) hold as the node records the transaction read.
func (t *txn) cacheEntries(i int) error {
	for j, key := range t.scans[i] {
		id, err := indexID(key)
		if err != nil {
			return err
		}
		nk := t.s.k.nodeKey(id)
		if _, ok := t.write[nk]; !ok {
			t.read[nk] = kv{val: t.scanVals[i][j], ok: true}
		}
	}
	return nil
}

// fetchNodes reads the records of ids in as few round trips as it can.
func (t *txn) fetchNodes(ids []uint32) error {
	keys := make([]string, len(ids))
	for i, id := range ids {
		keys[i] = t.s.k.nodeKey(id)
	}
	return t.fetch(keys...)
}

// adopt checks p against the stored pool (idkeeper.CheckPoolChange; with
// shrinkOK, for a Reset, idkeeper.CheckPoolReset) and, on a store without a pool,
// records p's First and layout. p is valid.
func (t *txn) adopt(p idkeeper.PoolSpec, shrinkOK bool) error {
	stored, err := t.meta.pool()
	if err != nil {
		return err
	}
	if record, err := leasetx.Adopt(stored, p, shrinkOK); err != nil || !record {
		return err
	}
	t.meta.First, t.meta.Layout = uint64(p.First), idkeeper.FormatLayout(p.LayoutOrDefault())
	return nil
}

// growTo grows the pool to p (recorded with p's First and layout when the store
// has none); another First or layout, or a smaller pool, is an INVALID_REQUEST
// Error (idkeeper.CheckPoolChange).
func (t *txn) growTo(p idkeeper.PoolSpec) error {
	if err := t.adopt(p, false); err != nil {
		return err
	}
	t.grow(p.Nodes, nil)
	return nil
}

// grow adds node IDs up to n, each at the back of the free order in node ID
// order, watermark zero; with reset applied to the new record first (a Reset's
// raise), else ready.
func (t *txn) grow(n int, reset func(*nodeRec)) {
	for id := t.meta.end(); id < t.meta.First+uint64(n); id++ {
		t.meta.Seq++
		r := nodeRec{watermark: leasetx.ZeroMs, quarUntil: leasetx.ZeroMs, floor: leasetx.ZeroMs, freeSeq: t.meta.Seq, place: placeReady}
		if reset != nil {
			reset(&r)
		}
		t.place(uint32(id), &r)
	}
	t.meta.Nodes = max(t.meta.Nodes, uint64(n))
}

// unplace takes a free node out of its index.
func (t *txn) unplace(id uint32, r *nodeRec) {
	switch r.place {
	case placeReady:
		t.del(t.s.k.readyKey(r.freeSeq, id))
	case placeCooling:
		t.del(t.s.k.coolingKey(r.fenced(), r.freeSeq, id))
		t.meta.Cooling--
	case placeQuarantine:
		t.del(t.s.k.quarKey(r.quarUntil, id))
		t.meta.Quarantined--
	}
	r.place = placeHeld
}

// place puts a free node, out of every index, into the one its state at now calls
// for, and stores its record.
func (t *txn) place(id uint32, r *nodeRec) {
	r.lease = nil
	r.place = leasetx.FreePlace(r.quarUntil, r.fenced(), t.now)
	switch r.place {
	case placeQuarantine:
		t.meta.Quarantined++
	case placeCooling:
		t.meta.Cooling++
	}
	t.putNode(id, *r)
}

// modify applies fn to a node's record and, when the node is free, moves it to the
// index the new record calls for.
func (t *txn) modify(id uint32, fn func(*nodeRec)) error {
	r, err := t.node(id)
	if err != nil {
		return err
	}
	t.modifyRec(id, r, fn)
	return nil
}

func (t *txn) modifyRec(id uint32, r nodeRec, fn func(*nodeRec)) {
	if r.place == placeHeld {
		fn(&r)
		t.putNode(id, r)
		return
	}
	t.unplace(id, &r)
	fn(&r)
	t.place(id, &r)
}

// staleOps read the index entries that time has moved on at now: ended
// quarantines and passed cooling watermarks, up to one more than promoteBatch of
// each. They go into begin; promote takes their results.
func (t *txn) staleOps() []clientv3.Op {
	k := t.s.k
	return []clientv3.Op{
		clientv3.OpGet(k.quar, clientv3.WithRange(before(k.quar, t.now+1)), clientv3.WithLimit(promoteBatch+1)),
		clientv3.OpGet(k.cooling, clientv3.WithRange(before(k.cooling, t.now)), clientv3.WithLimit(promoteBatch+1)),
	}
}

// promote moves the stale entries staleOps found (scans 0 and 1) to the index
// each node's state calls for at now. more reports that there were more
// than one transaction moves: the caller commits these moves (errPartial) and
// starts over.
func (t *txn) promote() (more bool, err error) {
	for i := range 2 {
		if err := t.cacheEntries(i); err != nil {
			return false, err
		}
	}
	quar, cooling := t.scans[0], t.scans[1]
	more = len(quar) > promoteBatch || len(cooling) > promoteBatch
	keys := slices.Concat(quar[:min(len(quar), promoteBatch)], cooling[:min(len(cooling), promoteBatch)])
	ids := make([]uint32, len(keys))
	for i, key := range keys {
		if ids[i], err = indexID(key); err != nil {
			return false, err
		}
	}
	if err := t.fetchNodes(ids); err != nil {
		return false, err
	}
	for _, id := range ids {
		if err := t.modify(id, func(*nodeRec) {}); err != nil {
			return false, err
		}
	}
	return more, nil
}

// withPut returns keys with the keys under index that the transaction has put,
// sorted, without those it has deleted.
func (t *txn) withPut(keys []string, index string) []string {
	out := slices.Clone(keys)
	for k, w := range t.write {
		if w.ok && len(k) > len(index) && k[:len(index)] == index {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	out = slices.Compact(out)
	return slices.DeleteFunc(out, func(k string) bool { w, ok := t.write[k]; return ok && !w.ok })
}

// keyHeld is how many node IDs the leases of key hold.
func (t *txn) keyHeld(key string) (int, error) {
	v, ok, err := t.get(t.s.k.keyHeld + key)
	if err != nil || !ok {
		return 0, err
	}
	n, err := strconv.Atoi(string(v))
	if err != nil {
		return 0, fmt.Errorf("corrupt count of key %q: %w", key, err)
	}
	return n, nil
}

// keyHolds adds delta to the node IDs key's leases hold.
func (t *txn) keyHolds(key string, delta int) error {
	n, err := t.keyHeld(key)
	if err != nil {
		return err
	}
	if n += delta; n <= 0 {
		t.del(t.s.k.keyHeld + key)
	} else {
		t.put(t.s.k.keyHeld+key, strconv.Itoa(n))
	}
	return nil
}

// holding returns the requester index entry of the requester with key; ok is
// false when it holds nothing.
func (t *txn) holding(key string) (holding, bool, error) {
	v, ok, err := t.get(t.s.k.req + key)
	if err != nil || !ok {
		return holding{}, false, err
	}
	h, err := decodeHolding(v)
	return h, err == nil, err
}

// putHolding stores the requester index entry of key, or deletes it when empty.
func (t *txn) putHolding(key string, h holding) {
	if len(h.IDs) == 0 {
		t.del(t.s.k.req + key)
		return
	}
	t.put(t.s.k.req+key, encodeHolding(h))
}

// dropHeld takes one node out of a requester's index entry.
func (t *txn) dropHeld(key string, id uint32) error {
	h, ok, err := t.holding(key)
	if err != nil || !ok {
		return err
	}
	t.putHolding(key, h.Without(id))
	return nil
}

// release deletes a held node's lease and puts the node at the back of the free
// order. The caller updates the requester index.
func (t *txn) release(id uint32, r *nodeRec) error {
	l := r.lease
	t.del(t.s.k.expiryKey(l.ExpiresAt, id))
	if err := t.keyHolds(l.KeyID, -1); err != nil {
		return err
	}
	t.meta.Held--
	t.meta.Seq++
	r.freeSeq = t.meta.Seq
	t.place(id, r)
	return nil
}

// livePool reads the live meta record (at *rev when it is not 0, else the newest,
// setting *rev) and returns PoolMismatch when it holds a pool with another First or
// layout than m's.
func (l *loader) livePool(ctx context.Context, m snapshot.Meta, rev *int64) error {
	var opts []clientv3.OpOption
	if *rev > 0 {
		opts = append(opts, clientv3.WithRev(*rev))
	}
	resp, err := l.s.c.Get(ctx, l.s.k.meta, opts...)
	if err != nil {
		return wrap("load snapshot", err)
	}
	if *rev == 0 {
		*rev = resp.Header.Revision
	}
	if len(resp.Kvs) == 0 {
		return nil
	}
	live, err := decodeMeta(resp.Kvs[0].Value)
	if err != nil {
		return err
	}
	lp, err := live.pool()
	if err != nil {
		return err
	}
	if lp.Nodes > 0 && !lp.SameSpace(m.Pool()) {
		return idkeeper.PoolMismatch(lp, m.Pool())
	}
	return nil
}
