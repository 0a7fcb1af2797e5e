package etcd

import (
	"cmp"
	"fmt"
	"strconv"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/internal/histrec"
	"github.com/idkeeper/idkeeper/internal/leasetx"
)

// rules is the transaction as the shared lease rules (internal/leasetx) use it:
// the read and write sets of txn, committed with a compare on the meta record
// (update), give them isolation and atomic commit.
type rules struct{ t *txn }

var _ leasetx.Tx = rules{}

// FreeNodes, like the pool and the fencing counter, is the meta record's, as
// the transaction read it at its start and will write it.
func (r rules) FreeNodes() int {
	m := r.t.meta
	return int(m.Nodes - m.Held - m.Quarantined)
}

func (r rules) InPool(id idkeeper.NodeID) bool { return r.t.meta.inPool(id) }
func (r rules) Fence() uint64                  { return r.t.meta.Fence }
func (r rules) NextToken() uint64              { r.t.meta.Fence++; return r.t.meta.Fence }
func (r rules) Now() int64                     { return r.t.now }
func (r rules) History() histrec.Log           { return r.t.histLog() }

func (r rules) KeyHeld(keyID string) (int, error) { return r.t.keyHeld(keyID) }

func (r rules) Node(id uint32) (leasetx.Node, error) {
	n, err := r.t.node(id)
	return n.tx(), err
}

func (r rules) Lease(id uint32) (leasetx.Lease, error) {
	n, err := r.t.node(id)
	if err != nil {
		return leasetx.Lease{}, err
	}
	if n.lease == nil {
		return leasetx.Lease{}, errNoLease(id)
	}
	return *n.lease, nil
}

func (r rules) Holding(key string) (leasetx.Holding, error) {
	h, _, err := r.t.holding(key)
	return h, err
}

func (r rules) PutHolding(key string, h leasetx.Holding) error {
	r.t.putHolding(key, h)
	return nil
}

// ReadAhead reads the node and history records of h's leases and of the
// possible claims in one round trip.
func (r rules) ReadAhead(h leasetx.Holding, claims []idkeeper.Claim) error {
	k := r.t.s.k
	keys := make([]string, 0, 2*(len(h.IDs)+len(claims)))
	for i, id := range h.IDs {
		keys = append(keys, k.nodeKey(id), k.histKey(id, h.Tokens[i]))
	}
	for _, c := range claims {
		if c.Possible() && r.t.meta.inPool(c.NodeID) {
			keys = append(keys, k.nodeKey(uint32(c.NodeID)), k.histKey(uint32(c.NodeID), c.Token))
		}
	}
	return r.t.fetch(keys...)
}

// Promote moves up to promoteBatch entries of each free index (those staleOps
// read); when there were more, errPartial commits them and runs the step again.
func (r rules) Promote() error {
	if more, err := r.t.promote(); err != nil || more {
		return cmp.Or(err, errPartial)
	}
	return nil
}

// Scan takes its entries from the ranges Alloc's first read made (scans 2 and
// 3, with the records they hold), joined by those the transaction has put.
// ReadyFrom moves past the ready entries returned: Alloc takes them all, and
// every other one is later.
func (r rules) Scan(p leasetx.Place, n int) ([]uint32, error) {
	t, k := r.t, r.t.s.k
	i, index := 3, k.cooling
	if p == placeReady {
		i, index = 2, k.ready
		if t.readyStart > t.meta.ReadyFrom {
			// Another Store put a ready entry below where the first read started.
			keys, vals, err := t.scan(k.readyKey(t.meta.ReadyFrom, 0), clientv3.GetPrefixRangeEnd(k.ready), n)
			if err != nil {
				return nil, err
			}
			t.scans[2], t.scanVals[2] = keys, vals
		}
	}
	if err := t.cacheEntries(i); err != nil {
		return nil, err
	}
	keys := t.withPut(t.scans[i], index)
	keys = keys[:min(n, len(keys))]
	if p == placeReady && len(keys) > 0 {
		last := keys[len(keys)-1]
		seq, err := strconv.ParseUint(last[len(k.ready):len(k.ready)+16], 16, 64)
		if err != nil {
			return nil, fmt.Errorf("malformed ready entry %q", last)
		}
		t.meta.ReadyFrom = seq + 1
	}
	ids := make([]uint32, len(keys))
	for j, key := range keys {
		id, err := indexID(key)
		if err != nil {
			return nil, err
		}
		ids[j] = id
	}
	return ids, t.fetchNodes(ids)
}

func (r rules) Take(id uint32, l leasetx.Lease, n leasetx.Node) error {
	rec, err := r.t.node(id)
	if err != nil {
		return err
	}
	r.t.unplace(id, &rec)
	rec.set(n)
	rec.lease = &l
	r.t.putNode(id, rec)
	r.t.meta.Held++
	return r.t.keyHolds(l.KeyID, 1)
}

func (r rules) Extend(id uint32, old, l leasetx.Lease) error {
	rec, err := r.t.node(id)
	if err != nil {
		return err
	}
	if rec.lease == nil {
		return fmt.Errorf("node %d is in a requester index but holds no lease", id)
	}
	if l.ExpiresAt > old.ExpiresAt {
		r.t.del(r.t.s.k.expiryKey(old.ExpiresAt, id))
	}
	rec.lease, rec.watermark = &l, max(rec.watermark, l.ExpiresAt)
	r.t.putNode(id, rec)
	return nil
}

// Free reads ahead, in one round trip, the keys freeing the lease reads and
// writes: its requester's index entry, its key's count and its history record.
func (r rules) Free(id uint32, l leasetx.Lease, n leasetx.Node) error {
	k := r.t.s.k
	if err := r.t.fetch(k.req+l.Requester, k.keyHeld+l.KeyID, k.histKey(id, l.Token)); err != nil {
		return err
	}
	rec, err := r.t.node(id)
	if err != nil {
		return err
	}
	rec.set(n)
	if err := r.t.release(id, &rec); err != nil {
		return err
	}
	return r.t.dropHeld(l.Requester, id)
}

// tx is what the shared rules read of the record.
func (r nodeRec) tx() leasetx.Node {
	return leasetx.Node{Watermark: r.watermark, QuarUntil: r.quarUntil, Floor: r.floor, LastToken: r.lastToken,
		Restorable: r.restorable, Held: r.lease != nil}
}

// set stores what the shared rules decide of the record: its watermark,
// quarantine, last token and restorable flag (its place is the store's).
func (r *nodeRec) set(n leasetx.Node) {
	r.watermark, r.quarUntil, r.lastToken, r.restorable = n.Watermark, n.QuarUntil, n.LastToken, n.Restorable
}

// place names the index that holds a free node; placeHeld: none, a lease holds it.
type place = leasetx.Place

const (
	placeHeld       = leasetx.Held
	placeReady      = leasetx.Ready
	placeCooling    = leasetx.Cooling
	placeQuarantine = leasetx.Quarantine
)

// errNoLease is the error of a node that an index says is held but whose record
// holds no lease: a store that was written by something else.
func errNoLease(id uint32) error {
	return fmt.Errorf("node %d is indexed as held but its record holds no lease", id)
}
