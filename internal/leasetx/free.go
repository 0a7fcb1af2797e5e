package leasetx

import (
	"cmp"
	"time"

	"github.com/idkeeper/idkeeper"
)

// On is l as the lease on node id; an error when l's requester key does not
// parse.
func (l Lease) On(id uint32) (idkeeper.Lease, error) {
	r, err := idkeeper.ParseRequesterKey(l.Requester)
	if err != nil {
		return idkeeper.Lease{}, err
	}
	return idkeeper.Lease{NodeID: idkeeper.NodeID(id), Requester: r, NotBefore: MsTime(l.NotBefore),
		ExpiresAt: MsTime(l.ExpiresAt), FencingToken: l.Token, GrantedAt: MsTime(l.GrantedAt),
		RenewedAt: MsTime(l.RenewedAt), KeyID: l.KeyID}, nil
}

// Revoke ends the lease with token on node (idkeeper.LeaseStore.RevokeLease):
// the node's watermark rises to the lease's expiry, its quarantine to that
// expiry + grace, a claim can no longer restore it, and the node is freed (into
// the quarantine index, or ready or cooling when that end has passed already);
// the history ends the lease revoked. It returns the lease as it was, or
// idkeeper.ErrNotFound when node is outside the pool, free, or held under
// another token. grace is valid (idkeeper.CheckGrace).
func Revoke(t Tx, node idkeeper.NodeID, token uint64, grace time.Duration) (idkeeper.Lease, error) {
	if !t.InPool(node) {
		return idkeeper.Lease{}, idkeeper.ErrNotFound
	}
	id := uint32(node)
	n, err := t.Node(id)
	if err != nil || !n.Held {
		return idkeeper.Lease{}, cmp.Or[error](err, idkeeper.ErrNotFound)
	}
	l, err := t.Lease(id)
	if err != nil || l.Token != token {
		return idkeeper.Lease{}, cmp.Or[error](err, idkeeper.ErrNotFound)
	}
	out, err := l.On(id)
	if err != nil {
		return idkeeper.Lease{}, err
	}
	n.Watermark = max(n.Watermark, l.ExpiresAt)
	n.QuarUntil = max(n.QuarUntil, l.ExpiresAt+grace.Milliseconds())
	n.Restorable = false
	if err := t.Free(id, l, n); err != nil {
		return idkeeper.Lease{}, err
	}
	if err := t.History().End(id, l.Token, idkeeper.EndRevoked); err != nil {
		return idkeeper.Lease{}, err
	}
	return out, nil
}

// Reclaimed ends the lease on the held node id, which Reclaim found past its
// expiry + grace: the node is freed as it is, and the history ends the lease
// reclaimed.
func Reclaimed(t Tx, id uint32) error {
	n, err := t.Node(id)
	if err != nil {
		return err
	}
	l, err := t.Lease(id)
	if err != nil {
		return err
	}
	if err := t.Free(id, l, n); err != nil {
		return err
	}
	return t.History().End(id, l.Token, idkeeper.EndReclaimed)
}
