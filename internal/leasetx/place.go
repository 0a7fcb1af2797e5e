package leasetx

// Place names the one index that holds a node: none while it is held, else the
// free index its state called for when it was placed. The stores keep its value
// in every node record (one byte): the values never change.
type Place byte

// The places. A free node is handed out from Ready first, least recently freed
// first, then from Cooling, lowest fenced watermark first; never from Quarantine.
const (
	Held       Place = 0
	Ready      Place = 1
	Cooling    Place = 2
	Quarantine Place = 3
)

// FreePlace is the free index a free node belongs in at now (Unix ms): the
// quarantine while quarUntil is after now, else ready once its fenced watermark
// (max of watermark and floor) is before now, cooling until then. Time moves a
// node on by itself; the stores make those moves lazily (promote).
func FreePlace(quarUntil, fenced, now int64) Place {
	switch {
	case quarUntil > now:
		return Quarantine
	case fenced < now:
		return Ready
	default:
		return Cooling
	}
}

// Taken is the free node n given to l's holder and the lease as granted: a
// fresh grant starts after the node's fenced watermark (NotBefore), a restored
// one keeps l's NotBefore; the node's watermark rises to l's expiry, l's token
// becomes its last, and no claim can restore it any more.
func Taken(n Node, l Lease, fresh bool) (Node, Lease) {
	if fresh {
		l.NotBefore = n.Fenced() + 1
	}
	n.Watermark, n.LastToken, n.Restorable, n.Held = max(n.Watermark, l.ExpiresAt), l.Token, false, true
	return n, l
}

// Extended is l extended at now (Unix ms) to expire at least at exp, renewed
// (RenewedAt now) or not; the node's watermark must rise to its ExpiresAt with it.
func Extended(l Lease, exp, now int64, renewed bool) Lease {
	l.ExpiresAt = max(l.ExpiresAt, exp)
	if renewed {
		l.RenewedAt = now
	}
	return l
}
