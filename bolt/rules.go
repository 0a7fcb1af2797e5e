package bolt

import (
	"slices"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/internal/histrec"
	"github.com/idkeeper/idkeeper/internal/leasetx"
)

// rules is the transaction as the shared lease rules (internal/leasetx) use it.
type rules struct{ t *txn }

var _ leasetx.Tx = rules{}

func (r rules) Now() int64                     { return r.t.now }
func (r rules) InPool(id idkeeper.NodeID) bool { return r.t.inPool(id) }
func (r rules) History() histrec.Log           { return r.t.histLog() }
func (r rules) Node(id uint32) (leasetx.Node, error) {
	n, err := r.t.node(id)
	return n.tx(), err
}

func (r rules) Lease(id uint32) (leasetx.Lease, error) { return r.t.lease(id) }

func (r rules) Restore(id uint32, l leasetx.Lease) error {
	if err := r.t.take(id, l, false); err != nil {
		return err
	}
	ids, err := r.t.heldBy(l.Requester)
	if err != nil {
		return err
	}
	ids = append(ids, id)
	slices.Sort(ids)
	return r.t.reqs.Put([]byte(l.Requester), encodeIDs(ids))
}

func (r rules) Free(id uint32, l leasetx.Lease, n leasetx.Node) error {
	rec, err := r.t.node(id)
	if err != nil {
		return err
	}
	rec.set(n)
	if err := r.t.release(id, &rec, l); err != nil {
		return err
	}
	return r.t.dropHeld(l.Requester, id)
}

// tx is what the shared rules read of the record.
func (r nodeRec) tx() leasetx.Node {
	return leasetx.Node{Watermark: r.watermark, QuarUntil: r.quarUntil, Floor: r.floor, LastToken: r.lastToken,
		Restorable: r.restorable, Held: r.place == placeHeld}
}

// set stores what the shared rules decide of the record: its watermark,
// quarantine, last token and restorable flag (its place is the store's).
func (r *nodeRec) set(n leasetx.Node) {
	r.watermark, r.quarUntil, r.lastToken, r.restorable = n.Watermark, n.QuarUntil, n.LastToken, n.Restorable
}
