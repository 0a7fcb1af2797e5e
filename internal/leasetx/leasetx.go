// Package leasetx holds the lease rules of the stores that run Go inside one
// transaction (bolt, etcd; the SQL store next), written once over Tx. Redis
// keeps its Lua scripts; the contract suite (internal/harness/storetest) and its
// reference store judge both.
//
// What lives here: the steps Alloc (repeat grant, quota and admission, the pick
// order, fencing tokens, the new leases and their history), Renew (the claims
// of Claims: restore or contest; the extension), Remove (Removed: history end
// and watermark; the cooling charges of ChargeRemoved), Revoke and Reclaim's
// end of a lease (Reclaimed); the cooling-charge count (KeyCooling, Live); the
// generations of Init and Reset (Fresh, ResetGeneration); the pool check
// (Adopt); the free index a node belongs in (FreePlace, Place); the record
// rules of a grant and an extension (Taken, Extended); and a snapshot load's
// sequence (Load, Feed). Times are Unix milliseconds, as the stores keep them.
//
// # A new transactional store
//
// A store plugs in by implementing Tx over one of its transactions and running
// each step in it, with Step:
//
//	func (s *Store) Renew(ctx context.Context, g idkeeper.Guard, p idkeeper.RenewParams) (idkeeper.Grant, error) {
//		if err := p.Validate(); err != nil {
//			return idkeeper.Grant{}, err
//		}
//		return leasetx.Step(s.inTx(ctx, &g), func(t leasetx.Tx) (idkeeper.Grant, error) { return leasetx.Renew(t, p) })
//	}
//
// where inTx opens a transaction, checks the guard in it, calls its argument
// with the store's Tx and commits when that returns nil.
//
// The store keeps what is its own: the encoding of every record (Node, Lease,
// Holding, Charge and the history's histrec.Rec), the free indexes behind
// Scan, Take and Free (Ready in free order, Cooling by fenced watermark, the
// quarantine by its end, each node's Place stored with its record), the
// expiry index, the counters (fencing, free order, held, quarantined, cooling),
// Promote, the growth of the pool, and how it reads ahead (ReadAhead, or the
// first reads of its own transaction). Init, Grow, Reset, Quarantine and Status
// use the rules here (Fresh, ResetGeneration, Adopt, FreePlace) over the
// store's own pool code.
//
// The rules guarantee, given that: the contract of idkeeper.LeaseStore for
// each step (the suite checks it), that every decision reads the records
// through Tx in the step's transaction, and that a step that returns an error
// wrote nothing the store should keep: the store drops the transaction.
//
// The store must guarantee: isolation (the step runs as if alone: a bbolt
// write transaction; etcd's read set compared at commit; SERIALIZABLE, or
// row locks on every record read, in SQL, with a serialization failure retried
// as a whole step), atomic commit (all of a step's writes or none), reads that
// see the transaction's own writes, and the instant Now fixed for the step.
package leasetx

import (
	"cmp"
	"slices"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/internal/histrec"
	"github.com/idkeeper/idkeeper/protocol"
)

// Node is what the rules read and decide of a node ID's record.
type Node struct {
	Watermark int64 // the store's own watermark, Unix ms
	QuarUntil int64 // the end of its quarantine, Unix ms
	Floor     int64 // what a Reset raised, Unix ms (read only: no rule here lowers or raises it)
	LastToken uint64
	// Restorable: a claim on the free node may restore its lease (a Reset set it).
	Restorable bool
	// Held: the node carries a lease.
	Held bool
}

// Fenced is the node's effective watermark: max(Watermark, Floor).
func (n Node) Fenced() int64 { return max(n.Watermark, n.Floor) }

// Lease is a held node's lease as the stores keep it: bolt and etcd use it as
// their lease record and encode it themselves.
type Lease struct {
	NotBefore, ExpiresAt, GrantedAt, RenewedAt int64 // Unix ms
	Token                                      uint64
	Requester                                  string // idkeeper.Requester.Key
	KeyID                                      string // the owner
}

// Claims handles the claims of a Renew by the requester with key
// (idkeeper.LeaseStore.Renew), in node ID order: a claim on a free restorable
// node whose token is newer than the node's last restores its lease; a newer
// claim on a node another requester holds stops both (the lease is deleted, the
// node quarantined past both windows + p.Grace). Every other claim is ignored.
// It returns the node IDs restored and contested, in node ID order.
func Claims(t Tx, key string, p idkeeper.RenewParams) (restored, contested []idkeeper.NodeID, err error) {
	cs := slices.Clone(p.Claims)
	slices.SortStableFunc(cs, func(a, b idkeeper.Claim) int { return cmp.Compare(a.NodeID, b.NodeID) })
	now := t.Now()
	for _, c := range cs {
		if !c.Possible() || !t.InPool(c.NodeID) || TimeMs(c.ExpiresAt) < now {
			continue
		}
		id := uint32(c.NodeID)
		n, err := t.Node(id)
		if err != nil {
			return nil, nil, err
		}
		if c.Token <= n.LastToken {
			continue
		}
		if n.Held {
			l, err := t.Lease(id)
			if err != nil {
				return nil, nil, err
			}
			if l.Requester == key {
				continue
			}
			if err := contest(t, id, n, l, c, p); err != nil {
				return nil, nil, err
			}
			contested = append(contested, c.NodeID)
			continue
		}
		if !n.Restorable {
			continue
		}
		exp := max(TimeMs(c.ExpiresAt), now+p.Duration.Milliseconds())
		l := Lease{NotBefore: max(TimeMs(c.NotBefore), n.Watermark+1), ExpiresAt: exp, GrantedAt: now,
			RenewedAt: ZeroMs, Token: c.Token, Requester: key, KeyID: p.KeyID}
		if err := restore(t, id, l); err != nil {
			return nil, nil, err
		}
		if err := t.History().Claim(c, p.Requester, p.KeyID, &exp); err != nil {
			return nil, nil, err
		}
		restored = append(restored, c.NodeID)
	}
	return restored, contested, nil
}

// contest stops both claims on the held node id: l's lease is deleted and the
// node quarantined past both windows + grace; the history ends l contested and
// records c's grant, contested too.
func contest(t Tx, id uint32, n Node, l Lease, c idkeeper.Claim, p idkeeper.RenewParams) error {
	n.Watermark = max(n.Watermark, l.ExpiresAt, TimeMs(c.ExpiresAt))
	n.QuarUntil = max(n.QuarUntil, n.Watermark+p.Grace.Milliseconds())
	n.LastToken, n.Restorable = c.Token, false
	if err := t.Free(id, l, n); err != nil {
		return err
	}
	if err := t.History().End(id, l.Token, idkeeper.EndContested); err != nil {
		return err
	}
	return t.History().Claim(c, p.Requester, p.KeyID, nil)
}

// CheckQuota checks the key's quota: when p.MaxNodes is set, the node IDs the
// key's leases hold (held) and its cooling charges (cooling) plus p.Count may
// not pass it (QUOTA_EXCEEDED). held and cooling are read only then.
func CheckQuota(p idkeeper.AllocParams, held, cooling func() (int, error)) error {
	if p.MaxNodes <= 0 {
		return nil
	}
	n, err := held()
	if err != nil {
		return err
	}
	cool, err := cooling()
	if err != nil {
		return err
	}
	if n += cool; n+p.Count > p.MaxNodes {
		return idkeeper.QuotaExceededCooling(p.MaxNodes, n, cool, p.Count)
	}
	return nil
}

// AdmitFree checks the free node IDs (free: EXHAUSTED below p.Count), then the
// fencing counter (fence: the ceiling may not be passed). Alloc calls it after
// CheckQuota and Promote, so that the nodes time has freed count.
func AdmitFree(p idkeeper.AllocParams, free int, fence uint64) error {
	if free < p.Count {
		return idkeeper.Exhausted(p.Count, free)
	}
	if fence+uint64(p.Count) > idkeeper.MaxFencingToken {
		return idkeeper.FenceCeiling(fence, p.Count)
	}
	return nil
}

// Removed ends the lease l on node id, removed at now
// (idkeeper.LeaseStore.Remove): its history record ends removed, and, when the
// requester reported mintedUpTo, the record's window ends there (within the
// lease) and the node's watermark becomes that end, or the node's quarantine
// while it lasts. It returns the watermark to store (n.Watermark when none was
// reported).
func Removed(h histrec.Log, id uint32, n Node, l Lease, mintedUpTo time.Time) (int64, error) {
	minted := !mintedUpTo.IsZero()
	end := max(min(TimeMs(mintedUpTo), l.ExpiresAt), l.NotBefore-1)
	err := h.Edit(id, l.Token, func(r *histrec.Rec) {
		r.End, r.EndedAt = string(idkeeper.EndRemoved), h.Now
		if minted {
			r.WindowEnd, r.MintedUpTo = end, TimeMs(mintedUpTo)
		}
	})
	if err != nil || !minted {
		return n.Watermark, err
	}
	if n.QuarUntil > h.Now {
		end = max(end, n.QuarUntil)
	}
	return end, nil
}

// ZeroMs is the zero time.Time in Unix ms: a lease never renewed, a watermark,
// floor or quarantine never set.
var ZeroMs = time.Time{}.UnixMilli()

// TimeMs is t truncated to the millisecond (protocol.Millis), in Unix ms.
func TimeMs(t time.Time) int64 { return protocol.Millis(t).UnixMilli() }

// MsTime is the instant ms (Unix ms), in UTC.
func MsTime(ms int64) time.Time { return time.UnixMilli(ms).UTC() }
