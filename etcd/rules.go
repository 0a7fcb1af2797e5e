package etcd

import (
	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/internal/histrec"
	"github.com/idkeeper/idkeeper/internal/leasetx"
)

// rules is the transaction as the shared lease rules (internal/leasetx) use it.
type rules struct{ t *txn }

var _ leasetx.Tx = rules{}

func (r rules) Now() int64                     { return r.t.now }
func (r rules) InPool(id idkeeper.NodeID) bool { return r.t.meta.inPool(id) }
func (r rules) History() histrec.Log           { return r.t.histLog() }
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

func (r rules) Restore(id uint32, l leasetx.Lease) error {
	if err := r.t.take(id, l, false); err != nil {
		return err
	}
	h, _, err := r.t.holding(l.Requester)
	if err != nil {
		return err
	}
	h.keyID = l.KeyID
	r.t.putHolding(l.Requester, h.with(id, l.Token))
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
