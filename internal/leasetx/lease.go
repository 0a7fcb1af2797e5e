package leasetx

import (
	"fmt"

	"github.com/idkeeper/idkeeper"
)

// Alloc is idkeeper.LeaseStore.Alloc in one transaction; p is valid. A
// requester that holds leases already gets them again, extended to expire at
// least p.First from now (COUNT_MISMATCH when it holds another count). Else the
// grant is new: the quota, the free node IDs and the fencing counter are
// checked (CheckQuota, then AdmitFree after Promote), p.Count node IDs are
// picked (Ready first, least recently freed first, then Cooling, lowest fenced
// watermark first), each gets the next fencing token in pick order and a lease
// from now to p.First from now, starting after its fenced watermark, and the
// history records each grant. A requester's leases belong to one API key
// (LEASE_NOT_OWNED).
func Alloc(t Tx, p idkeeper.AllocParams) (idkeeper.Grant, error) {
	key := p.Requester.Key()
	now := t.Now()
	exp := now + p.First.Milliseconds()
	h, err := owned(t, key, p.KeyID)
	if err != nil {
		return idkeeper.Grant{}, err
	}
	if len(h.IDs) > 0 {
		if len(h.IDs) != p.Count {
			return idkeeper.Grant{}, idkeeper.CountMismatch(len(h.IDs), p.Count)
		}
		if err := t.ReadAhead(h, nil); err != nil {
			return idkeeper.Grant{}, err
		}
		if err := extendAll(t, h, exp, false); err != nil {
			return idkeeper.Grant{}, err
		}
		return grant(t, h.IDs)
	}
	keyHeld := func() (int, error) { return t.KeyHeld(p.KeyID) }
	cooling := func() (int, error) { return KeyCooling(t, p.KeyID) }
	if err := CheckQuota(p, keyHeld, cooling); err != nil {
		return idkeeper.Grant{}, err
	}
	if err := t.Promote(); err != nil {
		return idkeeper.Grant{}, err
	}
	if err := AdmitFree(p, t.FreeNodes(), t.Fence()); err != nil {
		return idkeeper.Grant{}, err
	}
	ids, err := pick(t, p.Count)
	if err != nil {
		return idkeeper.Grant{}, err
	}
	h = Holding{KeyID: p.KeyID}
	for _, id := range ids {
		l := Lease{ExpiresAt: exp, GrantedAt: now, RenewedAt: ZeroMs, Token: t.NextToken(), Requester: key, KeyID: p.KeyID}
		if err := take(t, id, l, true); err != nil {
			return idkeeper.Grant{}, err
		}
		h = h.With(id, l.Token)
	}
	if err := t.PutHolding(key, h); err != nil {
		return idkeeper.Grant{}, err
	}
	gr, err := grant(t, h.IDs)
	if err != nil {
		return idkeeper.Grant{}, err
	}
	for _, l := range gr.Leases {
		if err := t.History().Grant(l, p.Client); err != nil {
			return idkeeper.Grant{}, err
		}
	}
	return gr, nil
}

// Renew is idkeeper.LeaseStore.Renew in one transaction; p is valid. The
// claims are handled first (Claims), then every lease the requester holds,
// restored ones included, is extended to expire at least p.Duration from now
// and stamped renewed; the history's windows follow. A requester's leases
// belong to one API key (LEASE_NOT_OWNED).
func Renew(t Tx, p idkeeper.RenewParams) (idkeeper.Grant, error) {
	key := p.Requester.Key()
	h, err := owned(t, key, p.KeyID)
	if err != nil {
		return idkeeper.Grant{}, err
	}
	if err := t.ReadAhead(h, p.Claims); err != nil {
		return idkeeper.Grant{}, err
	}
	restored, contested, err := Claims(t, key, p)
	if err != nil {
		return idkeeper.Grant{}, err
	}
	if h, err = t.Holding(key); err != nil {
		return idkeeper.Grant{}, err
	}
	if err := extendAll(t, h, t.Now()+p.Duration.Milliseconds(), true); err != nil {
		return idkeeper.Grant{}, err
	}
	gr, err := grant(t, h.IDs)
	gr.Restored, gr.Contested = restored, contested
	return gr, err
}

// Remove is idkeeper.LeaseStore.Remove in one transaction; p is valid. Every
// lease the requester holds ends removed (Removed: the history, and the
// watermark the reported p.MintedUpTo leaves), each node is freed, and the key
// is charged for the nodes that are left cooling (ChargeRemoved). It returns
// the number of leases removed. A requester's leases belong to one API key
// (LEASE_NOT_OWNED).
func Remove(t Tx, p idkeeper.RemoveParams) (int, error) {
	key := p.Requester.Key()
	h, err := owned(t, key, p.KeyID)
	if err != nil || len(h.IDs) == 0 {
		return 0, err
	}
	if err := t.ReadAhead(h, nil); err != nil {
		return 0, err
	}
	if err := t.PutHolding(key, Holding{}); err != nil {
		return 0, err
	}
	freed := make([]Node, len(h.IDs))
	for i, id := range h.IDs {
		n, err := t.Node(id)
		if err != nil {
			return 0, err
		}
		l, err := t.Lease(id)
		if err != nil {
			return 0, err
		}
		if n.Watermark, err = Removed(t.History(), id, n, l, p.MintedUpTo); err != nil {
			return 0, err
		}
		if err := t.Free(id, l, n); err != nil {
			return 0, err
		}
		freed[i] = n
	}
	return len(h.IDs), ChargeRemoved(t, p.KeyID, h.IDs, freed)
}

// owned reads the requester index entry of the requester with key, or
// LEASE_NOT_OWNED when its leases belong to another API key than keyID.
func owned(t Tx, key, keyID string) (Holding, error) {
	h, err := t.Holding(key)
	if err != nil {
		return Holding{}, err
	}
	if len(h.IDs) > 0 && h.KeyID != keyID {
		return Holding{}, idkeeper.NotOwned()
	}
	return h, nil
}

// pick chooses count free node IDs: Ready ones first, then Cooling ones, each
// in its index's order. The counters (AdmitFree) must have promised them.
func pick(t Tx, count int) ([]uint32, error) {
	ids, err := t.Scan(Ready, count)
	if err != nil {
		return nil, err
	}
	if len(ids) < count {
		more, err := t.Scan(Cooling, count-len(ids))
		if err != nil {
			return nil, err
		}
		ids = append(ids, more...)
	}
	if len(ids) < count {
		return nil, fmt.Errorf("free indexes hold %d node IDs, counters promised %d", len(ids), count)
	}
	return ids, nil
}

// take gives the free node id to l's requester (Taken). The caller updates the
// requester index.
func take(t Tx, id uint32, l Lease, fresh bool) error {
	n, err := t.Node(id)
	if err != nil {
		return err
	}
	n, l = Taken(n, l, fresh)
	return t.Take(id, l, n)
}

// restore gives the free node id back to l's requester as l is, in the
// requester index too.
func restore(t Tx, id uint32, l Lease) error {
	if err := take(t, id, l, false); err != nil {
		return err
	}
	h, err := t.Holding(l.Requester)
	if err != nil {
		return err
	}
	h.KeyID = l.KeyID
	return t.PutHolding(l.Requester, h.With(id, l.Token))
}

// extendAll extends each of h's leases to expire at least at exp (Extended),
// the window of its history record with it.
func extendAll(t Tx, h Holding, exp int64, renewed bool) error {
	for i, id := range h.IDs {
		old, err := t.Lease(id)
		if err != nil {
			return err
		}
		l := Extended(old, exp, t.Now(), renewed)
		if err := t.Extend(id, old, l); err != nil {
			return err
		}
		if err := t.History().Extend(id, h.Tokens[i], l.ExpiresAt); err != nil {
			return err
		}
	}
	return nil
}

// grant is the grant of the leases on ids, at Now and the fencing counter.
func grant(t Tx, ids []uint32) (idkeeper.Grant, error) {
	g := idkeeper.Grant{Leases: make([]idkeeper.Lease, 0, len(ids)), Now: MsTime(t.Now()), Fence: t.Fence()}
	for _, id := range ids {
		rec, err := t.Lease(id)
		if err != nil {
			return idkeeper.Grant{}, err
		}
		l, err := rec.On(id)
		if err != nil {
			return idkeeper.Grant{}, err
		}
		g.Leases = append(g.Leases, l)
	}
	return g, nil
}
