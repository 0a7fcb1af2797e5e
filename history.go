package idkeeper

import (
	"context"
	"time"

	"github.com/idkeeper/idkeeper/protocol"
)

// The lease history (issue #16): one record per grant, kept by the store in the
// same atomic step as the grant, its renewals and its end, so that an ID can be
// traced back to the process that minted it. The window rule (DESIGN §4) makes
// the answer unique: the windows of a node ID's grants never overlap, so at most
// one record's window holds a given millisecond of a node ID.

// LeaseEnd says how a lease in the history ended; "" while it is held.
type LeaseEnd string

// The ends of a lease.
const (
	EndHeld      LeaseEnd = ""
	EndRemoved   LeaseEnd = "removed"   // its holder released it (Remove)
	EndReclaimed LeaseEnd = "reclaimed" // expired past the grace period (Reclaim)
	EndRevoked   LeaseEnd = "revoked"   // an operator revoked it (RevokeLease)
	EndContested LeaseEnd = "contested" // two holders claimed the node ID (Renew with a claim)
)

// Bounds of Config.HistoryRetention.
const (
	DefaultHistoryRetention = 30 * 24 * time.Hour
	MinHistoryRetention     = time.Hour
)

// ClientInfo is what a client reports about itself with Alloc, its host name and
// free labels, kept in the lease history only (protocol.ClientInfo, where its
// bounds are checked).
type ClientInfo = protocol.ClientInfo

// HistoryRecord is one grant of a node ID in the lease history. A record is
// keyed by (NodeID, Token). Times are kept to the millisecond.
type HistoryRecord struct {
	NodeID    NodeID
	Token     uint64 // the grant's fencing token
	Requester Requester
	KeyID     string     // the API key that allocated it
	Client    ClientInfo // what the client reported with its Alloc
	GrantedAt time.Time
	// NotBefore and WindowEnd bound the window the holder may have minted in:
	// NotBefore as granted (for a grant the store learned from a receipt, the
	// receipt's), WindowEnd the lease's latest ExpiresAt, raised on every Renew
	// and lowered to what the holder attested at a Remove with MintedUpTo. An
	// empty window has WindowEnd before NotBefore.
	NotBefore, WindowEnd time.Time
	End                  LeaseEnd  // EndHeld while the lease is held
	EndedAt              time.Time // zero while held
	MintedUpTo           time.Time // what the holder attested at Remove; zero otherwise
	// FromReceipt is true for a grant the store learned from its holder's receipt
	// after it had lost it (a restore or a contest), not from its own Alloc.
	FromReceipt bool
}

// Validate returns an INVALID_REQUEST Error when h cannot be a record: a bad
// requester or client (by the rule of stored records, ValidateStored), an unknown End, an EndedAt set while held or zero once
// ended, a MintedUpTo on a record not removed.
func (h HistoryRecord) Validate() error {
	if err := h.Requester.ValidateStored(); err != nil {
		return err
	}
	if err := h.Client.ValidateStored(); err != nil {
		return err
	}
	switch h.End {
	case EndHeld, EndRemoved, EndReclaimed, EndRevoked, EndContested:
	default:
		return protocol.Invalidf("end", "a lease ends removed, reclaimed, revoked or contested, not %q", h.End)
	}
	switch {
	case (h.End == EndHeld) != h.EndedAt.IsZero():
		return protocol.Invalidf("endedAt", "a held record has no end time, an ended one has one")
	case !h.MintedUpTo.IsZero() && h.End != EndRemoved:
		return protocol.Invalidf("mintedUpTo", "only a removed lease has a mintedUpTo")
	}
	return nil
}

// Holds reports whether t (to the millisecond) lies in the record's window.
func (h HistoryRecord) Holds(t time.Time) bool {
	t = t.Truncate(time.Millisecond)
	return !t.Before(h.NotBefore) && !t.After(h.WindowEnd)
}

// HistoryStore keeps the lease history. Every lease method of the store writes
// it in the same atomic step as the lease:
//
//   - Alloc: a new grant adds a record (End EndHeld, Client from AllocParams,
//     WindowEnd its ExpiresAt); an idempotent repeat raises WindowEnd with
//     ExpiresAt and keeps Client.
//   - Renew: raises WindowEnd of each renewed lease to its ExpiresAt. A restore
//     adds a record FromReceipt (NotBefore the claim's; GrantedAt now), or
//     reopens the one of that token; a contest ends the held lease's record
//     EndContested and records the claim's grant FromReceipt, EndContested,
//     window the claim's (or ends the existing record of that token).
//   - Remove: End EndRemoved, MintedUpTo as attested; with MintedUpTo, WindowEnd
//     becomes max(min(MintedUpTo, ExpiresAt), NotBefore − 1 ms) with the
//     lease's ExpiresAt and NotBefore (a restored lease's, not the claim's),
//     which the next grant's window starts after.
//   - Reclaim: EndReclaimed. RevokeLease: EndRevoked.
//   - Reset keeps the leases (DESIGN §7) and so their records. A grant the
//     store lost is lost from the history with it, and recorded again
//     FromReceipt when its holder's Renew brings the receipt.
//
// Ending sets EndedAt to the store's now. A lease the history has no record of
// (written before the history existed) is written nothing.
type HistoryStore interface {
	// LeaseAt returns the records of node whose window holds t, oldest token
	// first: at most one while the window rule holds; none when no grant the
	// store remembers covers t. It never writes.
	LeaseAt(ctx context.Context, node NodeID, t time.Time) ([]HistoryRecord, error)
	// NodeHistory returns up to limit (1..1000) records of node, newest token
	// first, those with a token below before only when before > 0.
	NodeHistory(ctx context.Context, node NodeID, before uint64, limit int) ([]HistoryRecord, error)
	// PruneHistory deletes up to limit (1..10000) records that ended before
	// before, oldest end first, and returns how many it deleted. Held records
	// are never deleted.
	PruneHistory(ctx context.Context, before time.Time, limit int) (int, error)
	// HistoryCount returns how many records the history holds.
	HistoryCount(ctx context.Context) (int, error)
}

// Limits of HistoryStore reads and prunes.
const (
	MaxHistoryPage  = 1000
	MaxHistoryPrune = 10000
)

// CheckHistoryLimit returns an INVALID_REQUEST Error unless 1 ≤ n ≤ max.
func CheckHistoryLimit(n, max int) error {
	if n < 1 || n > max {
		return protocol.Invalidf("limit", "limit must be 1..%d, got %d", max, n)
	}
	return nil
}
