package bolt

import (
	"fmt"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/internal/histrec"
	"github.com/idkeeper/idkeeper/internal/leasetx"
)

// rules is the transaction as the shared lease rules (internal/leasetx) use it:
// bbolt's one read-write transaction gives them isolation and atomic commit.
type rules struct{ t *txn }

var _ leasetx.Tx = rules{}

func (r rules) Now() int64                     { return r.t.now }
func (r rules) InPool(id idkeeper.NodeID) bool { return r.t.inPool(id) }
func (r rules) Fence() uint64                  { return r.t.fence }
func (r rules) NextToken() uint64              { r.t.fence++; return r.t.fence }
func (r rules) FreeNodes() int                 { return int(r.t.nodeCount - r.t.held - r.t.quarantineSize) }
func (r rules) History() histrec.Log           { return r.t.histLog() }
func (r rules) Promote() error                 { return r.t.promote() }
func (r rules) KeyHeld(keyID string) (int, error) {
	return r.t.keyHeldBy(keyID), nil
}

// ReadAhead does nothing: a bbolt read costs no round trip.
func (rules) ReadAhead(leasetx.Holding, []idkeeper.Claim) error { return nil }

func (r rules) Node(id uint32) (leasetx.Node, error) {
	n, err := r.t.node(id)
	return n.tx(), err
}

func (r rules) Lease(id uint32) (leasetx.Lease, error) { return r.t.lease(id) }

// Holding reads the requesters bucket's entry (the node IDs) and the leases it
// names (the tokens and the key).
func (r rules) Holding(key string) (leasetx.Holding, error) {
	ids, err := r.t.heldBy(key)
	if err != nil || len(ids) == 0 {
		return leasetx.Holding{}, err
	}
	h := leasetx.Holding{IDs: ids, Tokens: make([]uint64, len(ids))}
	for i, id := range ids {
		l, err := r.t.lease(id)
		if err != nil {
			return leasetx.Holding{}, err
		}
		if i > 0 && l.KeyID != h.KeyID {
			return leasetx.Holding{}, fmt.Errorf("requester %q holds leases of two API keys", key)
		}
		h.Tokens[i], h.KeyID = l.Token, l.KeyID
	}
	return h, nil
}

func (r rules) PutHolding(key string, h leasetx.Holding) error {
	if len(h.IDs) == 0 {
		return r.t.reqs.Delete([]byte(key))
	}
	return r.t.reqs.Put([]byte(key), encodeIDs(h.IDs))
}

func (r rules) Scan(p leasetx.Place, n int) ([]uint32, error) {
	b := r.t.ready
	if p == placeCooling {
		b = r.t.cooling
	}
	keys := collect(b, always, n)
	ids := make([]uint32, len(keys))
	for i, k := range keys {
		ids[i] = keyNode(k)
	}
	return ids, nil
}

func (r rules) Take(id uint32, l leasetx.Lease, n leasetx.Node) error {
	t := r.t
	rec, err := t.node(id)
	if err != nil {
		return err
	}
	if err := t.unplace(id, &rec); err != nil {
		return err
	}
	rec.set(n)
	if err := t.putNode(id, rec); err != nil {
		return err
	}
	if err := t.leases.Put(nodeKey(id), encodeLease(l)); err != nil {
		return err
	}
	t.held++
	if err := t.keyHolds(l.KeyID, 1); err != nil {
		return err
	}
	return t.expiry.Put(timeNodeKey(l.ExpiresAt, id), nil)
}

func (r rules) Extend(id uint32, old, l leasetx.Lease) error {
	t := r.t
	if l.ExpiresAt > old.ExpiresAt {
		if err := t.expiry.Delete(timeNodeKey(old.ExpiresAt, id)); err != nil {
			return err
		}
		if err := t.expiry.Put(timeNodeKey(l.ExpiresAt, id), nil); err != nil {
			return err
		}
	}
	if err := t.leases.Put(nodeKey(id), encodeLease(l)); err != nil {
		return err
	}
	return t.modify(id, func(rec *nodeRec) { rec.watermark = max(rec.watermark, l.ExpiresAt) })
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
