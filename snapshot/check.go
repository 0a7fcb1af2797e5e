package snapshot

import (
	"net/netip"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/audit"
	"github.com/idkeeper/idkeeper/protocol"
)

// Checker checks a snapshot as a Store's LoadSnapshot reads it:
// its meta (NewChecker), then every record in the order it comes (Check),
// then its end (Done). Every failure is an INVALID_REQUEST Error (field
// "snapshot") naming the problem. It keeps a few values, never the records, so a
// store may check a snapshot of any size as it streams by. bolt and redis share it;
// what only a store's layout can check (a requester whose leases belong to two API
// keys, a record too large for the store) the store checks itself.
type Checker struct {
	meta   Meta
	kind   int // of the last record checked; 0 before the first
	nodes  int // node records checked
	key    string
	user   string
	allow  netip.Prefix
	audits int // audit entries checked
	last   audit.Entry
	hist   idkeeper.HistoryRecord // the last history record checked
}

// The kinds of snapshot records, in the order Record states.
const (
	snapNode = 1 + iota
	snapKey
	snapUser
	snapAllow
	snapAudit
	snapHistory
)

var snapKindNames = [...]string{"", "node", "API key", "user", "allow-list entry", "audit entry", "history record"}

func snapInvalid(format string, args ...any) *idkeeper.Error {
	return protocol.Invalidf("snapshot", format, args...)
}

// NewChecker checks meta and returns the checker of the records that
// follow it: a generation with an ID, a Number of at least 1 and a known origin; a
// valid pool (PoolSpec.Validate of meta.Pool()); a fencing counter of at most MaxFencingToken;
// an audit head whose Seq and Hash are both set or both not.
func NewChecker(meta Meta) (*Checker, error) {
	g := meta.Generation
	switch {
	case g.ID == "":
		return nil, snapInvalid("the snapshot has no generation ID")
	case g.Number == 0:
		return nil, snapInvalid("the snapshot's generation has number 0")
	case g.Origin != idkeeper.OriginFresh && g.Origin != idkeeper.OriginRecovered:
		return nil, snapInvalid("the snapshot's generation has the unknown origin %q", g.Origin)
	case meta.Fence > idkeeper.MaxFencingToken:
		return nil, snapInvalid("the snapshot's fencing counter %d is above %d", meta.Fence, uint64(idkeeper.MaxFencingToken))
	case (meta.AuditSeq == 0) != (meta.AuditHash == ""):
		return nil, snapInvalid("the snapshot's audit head (Seq %d, Hash %q) is half set", meta.AuditSeq, meta.AuditHash)
	}
	if err := meta.Pool().Validate(); err != nil {
		return nil, snapInvalid("the snapshot's pool: %s", protocol.ErrorMessage(err))
	}
	return &Checker{meta: meta}, nil
}

// Check checks the next record: exactly one field set; the kinds in the order
// Record states; the nodes First..First+Nodes-1 each once, in order; a node's lease
// on that node, with a valid requester and a token in 1..Fence; a LastToken of at
// most Fence; API keys with an ID, users with a name and a Version, each in
// ascending order without repeats; allow-list entries with a valid, masked prefix
// in ascending order (netip.Prefix.Compare) without repeats; audit entries in
// unbroken Seq order (each the one before + 1), none above the head; history
// records with a node in the pool and a token in 1..Fence, in ascending (NodeID,
// Token) order without repeats, each valid (HistoryRecord.Validate).
func (c *Checker) Check(rec Record) error {
	kind, n := 0, 0
	for k, set := range []bool{rec.Node != nil, rec.Key != nil, rec.User != nil, rec.Allow != nil, rec.Audit != nil, rec.History != nil} {
		if set {
			kind, n = k+1, n+1
		}
	}
	if n != 1 {
		return snapInvalid("a snapshot record holds %d records, not one", n)
	}
	if kind < c.kind {
		return snapInvalid("a %s record comes after the %s records", snapKindNames[kind], snapKindNames[c.kind])
	}
	if kind > snapNode && c.nodes < c.meta.Nodes {
		return snapInvalid("the snapshot holds %d of the %d nodes of its pool", c.nodes, c.meta.Nodes)
	}
	first := kind != c.kind
	c.kind = kind
	switch kind {
	case snapNode:
		return c.node(rec.Node)
	case snapKey:
		k := rec.Key
		if k.ID == "" {
			return snapInvalid("an API key has no ID")
		}
		if !first && k.ID <= c.key {
			return snapInvalid("API key %q comes after %q: repeated or out of order", k.ID, c.key)
		}
		c.key = k.ID
	case snapUser:
		u := rec.User
		switch {
		case u.Name == "":
			return snapInvalid("a user has no name")
		case u.Version == 0:
			return snapInvalid("user %q has Version 0", u.Name)
		case !first && u.Name <= c.user:
			return snapInvalid("user %q comes after %q: repeated or out of order", u.Name, c.user)
		}
		c.user = u.Name
	case snapAllow:
		p := rec.Allow.Prefix
		switch {
		case !p.IsValid() || p.Masked() != p:
			return snapInvalid("allow-list entry %s is not a masked IP prefix", p)
		case !first && p.Compare(c.allow) <= 0:
			return snapInvalid("allow-list entry %s comes after %s: repeated or out of order", p, c.allow)
		}
		c.allow = p
	case snapAudit:
		e := rec.Audit
		switch {
		case e.Seq == 0:
			return snapInvalid("an audit entry has Seq 0")
		case e.Seq > c.meta.AuditSeq:
			return snapInvalid("audit entry %d lies past the audit head %d", e.Seq, c.meta.AuditSeq)
		case c.audits > 0 && e.Seq != c.last.Seq+1:
			return snapInvalid("audit entry %d follows entry %d: a gap, or out of order", e.Seq, c.last.Seq)
		}
		c.audits++
		c.last = *e
	case snapHistory:
		return c.history(rec.History, first)
	}
	return nil
}

func (c *Checker) history(h *idkeeper.HistoryRecord, first bool) error {
	switch {
	case !c.meta.Pool().Holds(h.NodeID):
		return snapInvalid("a history record of node %d lies outside the pool %d..%d", h.NodeID, c.meta.First, c.meta.Pool().End()-1)
	case h.Token == 0 || h.Token > c.meta.Fence:
		return snapInvalid("a history record of node %d has token %d, outside 1..%d (the fencing counter)", h.NodeID, h.Token, c.meta.Fence)
	case !first && (h.NodeID < c.hist.NodeID || h.NodeID == c.hist.NodeID && h.Token <= c.hist.Token):
		return snapInvalid("history record (node %d, token %d) comes after (node %d, token %d): repeated or out of order",
			h.NodeID, h.Token, c.hist.NodeID, c.hist.Token)
	}
	if err := h.Validate(); err != nil {
		return snapInvalid("history record (node %d, token %d): %s", h.NodeID, h.Token, protocol.ErrorMessage(err))
	}
	c.hist = *h
	return nil
}

func (c *Checker) node(n *idkeeper.NodeState) error {
	switch {
	case !c.meta.Pool().Holds(n.NodeID):
		return snapInvalid("node %d lies outside the pool %d..%d", n.NodeID, c.meta.First, c.meta.Pool().End()-1)
	case n.NodeID < c.meta.First+idkeeper.NodeID(c.nodes):
		return snapInvalid("node %d comes after node %d: repeated or out of order", n.NodeID, c.meta.First+idkeeper.NodeID(c.nodes)-1)
	case n.NodeID > c.meta.First+idkeeper.NodeID(c.nodes):
		return snapInvalid("node %d is missing (the next record is node %d)", c.meta.First+idkeeper.NodeID(c.nodes), n.NodeID)
	case n.LastToken > c.meta.Fence:
		return snapInvalid("node %d has LastToken %d, above the fencing counter %d", n.NodeID, n.LastToken, c.meta.Fence)
	}
	c.nodes++
	l := n.Lease
	if l == nil {
		return nil
	}
	switch {
	case l.NodeID != n.NodeID:
		return snapInvalid("the lease of node %d names node %d", n.NodeID, l.NodeID)
	case l.FencingToken == 0 || l.FencingToken > c.meta.Fence:
		return snapInvalid("the lease of node %d has token %d, outside 1..%d (the fencing counter)", n.NodeID, l.FencingToken, c.meta.Fence)
	}
	if err := l.Requester.Validate(); err != nil {
		return snapInvalid("the lease of node %d: %s", n.NodeID, protocol.ErrorMessage(err))
	}
	return nil
}

// Done checks the end of the snapshot, after the last record: every node of the
// pool was there, and the last audit entry, when there is one, is the audit head
// (its Seq and Hash).
func (c *Checker) Done() error {
	if c.nodes < c.meta.Nodes {
		return snapInvalid("the snapshot holds %d of the %d nodes of its pool", c.nodes, c.meta.Nodes)
	}
	if c.audits > 0 && (c.last.Seq != c.meta.AuditSeq || c.last.Hash != c.meta.AuditHash) {
		return snapInvalid("the last audit entry (%d) is not the audit head (%d): entries are missing at the end, "+
			"or the head's hash differs", c.last.Seq, c.meta.AuditSeq)
	}
	return nil
}
