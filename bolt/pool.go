package bolt

import (
	"fmt"
	"slices"

	bbolt "go.etcd.io/bbolt"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/internal/leasetx"
)

func (t *txn) node(id uint32) (nodeRec, error) {
	v := t.nodes.Get(nodeKey(id))
	if v == nil {
		return nodeRec{}, fmt.Errorf("node %d of a pool of %d has no record", id, t.nodeCount)
	}
	return decodeNode(v)
}

func (t *txn) putNode(id uint32, r nodeRec) error { return t.nodes.Put(nodeKey(id), r.encode()) }

func (t *txn) lease(id uint32) (leaseRec, error) {
	v := t.leases.Get(nodeKey(id))
	if v == nil {
		return leaseRec{}, fmt.Errorf("node %d has no lease", id)
	}
	return decodeLease(v)
}

// pool reads the stored pool: the zero PoolSpec when the store holds none, else
// its First, size and layout (DefaultLayout when none is stored: a file written
// before layouts were).
func (t *txn) pool() (idkeeper.PoolSpec, error) {
	if t.nodeCount == 0 {
		return idkeeper.PoolSpec{}, nil
	}
	p := idkeeper.PoolSpec{First: idkeeper.NodeID(t.first), Nodes: int(t.nodeCount), Layout: idkeeper.DefaultLayout}
	if v := t.meta.Get(keyLayout); v != nil {
		l, err := idkeeper.ParseLayout(string(v))
		if err != nil {
			return idkeeper.PoolSpec{}, fmt.Errorf("bolt: the stored layout: %w", err)
		}
		p.Layout = l
	}
	return p, nil
}

// end is the first node ID past the pool.
func (t *txn) end() uint64 { return t.first + t.nodeCount }

// inPool reports whether id lies in the stored pool.
func (t *txn) inPool(id idkeeper.NodeID) bool {
	return id >= 0 && uint64(id) >= t.first && uint64(id) < t.end()
}

// adopt checks p against the stored pool (idkeeper.CheckPoolChange; with
// shrinkOK, for a Reset, idkeeper.CheckPoolReset) and, on a store without a pool,
// stores p's First and layout. p is valid.
func (t *txn) adopt(p idkeeper.PoolSpec, shrinkOK bool) error {
	stored, err := t.pool()
	if err != nil {
		return err
	}
	if record, err := leasetx.Adopt(stored, p, shrinkOK); err != nil || !record {
		return err
	}
	t.first = uint64(p.First)
	return t.meta.Put(keyLayout, []byte(idkeeper.FormatLayout(p.LayoutOrDefault())))
}

// grow adds node IDs up to n: free, ready, watermark zero, at the back of the free
// order, in NodeID order.
func (t *txn) grow(n int) error {
	if uint64(n) <= t.nodeCount {
		return nil
	}
	for i := t.end(); i < t.first+uint64(n); i++ { // uint64: a pool may end at node 2^32−1
		id := uint32(i)
		t.seq++
		r := nodeRec{watermark: zeroMs, quarUntil: zeroMs, floor: zeroMs, freeSeq: t.seq, place: placeReady}
		if err := t.ready.Put(seqNodeKey(r.freeSeq, id), nil); err != nil {
			return err
		}
		if err := t.putNode(id, r); err != nil {
			return err
		}
	}
	t.nodeCount = uint64(n)
	return nil
}

// unplace takes a free node out of its index.
func (t *txn) unplace(id uint32, r *nodeRec) error {
	var err error
	switch r.place {
	case placeReady:
		err = t.ready.Delete(seqNodeKey(r.freeSeq, id))
	case placeCooling:
		err = t.cooling.Delete(coolingKey(r.fenced(), r.freeSeq, id))
		t.coolingSize--
	case placeQuarantine:
		err = t.quar.Delete(timeNodeKey(r.quarUntil, id))
		t.quarantineSize--
	}
	r.place = placeHeld
	return err
}

// place puts a free node, out of every index, into the one its state at now calls
// for, and stores its record.
func (t *txn) place(id uint32, r *nodeRec) error {
	var err error
	r.place = leasetx.FreePlace(r.quarUntil, r.fenced(), t.now)
	switch r.place {
	case placeQuarantine:
		err = t.quar.Put(timeNodeKey(r.quarUntil, id), nil)
		t.quarantineSize++
	case placeReady:
		err = t.ready.Put(seqNodeKey(r.freeSeq, id), nil)
	default:
		err = t.cooling.Put(coolingKey(r.fenced(), r.freeSeq, id), nil)
		t.coolingSize++
	}
	if err != nil {
		return err
	}
	return t.putNode(id, *r)
}

// modify applies fn to a node's record and, when the node is free, moves it to the
// index the new record calls for.
func (t *txn) modify(id uint32, fn func(*nodeRec)) error {
	r, err := t.node(id)
	if err != nil {
		return err
	}
	if r.place == placeHeld {
		fn(&r)
		return t.putNode(id, r)
	}
	if err := t.unplace(id, &r); err != nil {
		return err
	}
	fn(&r)
	return t.place(id, &r)
}

// promote makes the moves time has made due: ended quarantines out of the
// quarantine index, passed watermarks from cooling to ready. It costs O(log n) per
// node moved and nothing more.
func (t *txn) promote() error {
	for _, k := range collect(t.quar, func(k []byte) bool { return keyTime(k) <= t.now }, -1) {
		if err := t.move(keyNode(k)); err != nil {
			return err
		}
	}
	for _, k := range collect(t.cooling, func(k []byte) bool { return keyTime(k) < t.now }, -1) {
		if err := t.move(keyNode(k)); err != nil {
			return err
		}
	}
	return nil
}

func (t *txn) move(id uint32) error { return t.modify(id, func(*nodeRec) {}) }

// collect copies the keys at the start of b while ok holds, at most limit of them
// (limit < 0: no limit). The copies stay valid while the transaction writes.
func collect(b *bbolt.Bucket, ok func(k []byte) bool, limit int) [][]byte {
	var keys [][]byte
	c := b.Cursor()
	for k, _ := c.First(); k != nil && ok(k) && limit != 0; k, _ = c.Next() {
		keys = append(keys, slices.Clone(k))
		limit--
	}
	return keys
}

func always([]byte) bool { return true }

// generation reads the generation record; ok is false when there is none.
func (t *txn) generation() (g idkeeper.Generation, ok bool, err error) {
	v := t.meta.Get(keyGeneration)
	if v == nil {
		return idkeeper.Generation{}, false, nil
	}
	g, err = decodeGeneration(v)
	return g, err == nil, err
}

// keyHeldKey is the keyheld bucket's key of an API key ID: prefixed, since bbolt
// keys cannot be empty and a key ID may be.
func keyHeldKey(key string) []byte { return append([]byte{'k'}, key...) }

// keyHolds adds delta to the node IDs key's leases hold.
func (t *txn) keyHolds(key string, delta int) error {
	n := int64(getU64(t.keyHeld.Get(keyHeldKey(key)))) + int64(delta)
	if n <= 0 {
		return t.keyHeld.Delete(keyHeldKey(key))
	}
	return t.keyHeld.Put(keyHeldKey(key), putU64(uint64(n)))
}

func (t *txn) keyHeldBy(key string) int { return int(getU64(t.keyHeld.Get(keyHeldKey(key)))) }
