package http

import (
	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/internal/wire"
)

// The bodies and the time format are internal/wire's; below, the registry's
// values in their wire form.

func layoutOf(l idkeeper.Layout) *wire.Layout {
	return &wire.Layout{Epoch: wire.FormatTime(l.Epoch), TimestampBits: l.TimestampBits, NodeBits: l.NodeBits, SequenceBits: l.SequenceBits}
}

// leasesOf never returns nil: an empty list is sent as [], the definite "holds
// nothing" answer of Renew. A NotBefore before the layout's epoch (a node ID never
// used, whose watermark is the zero time) is sent as the epoch: no ID can carry an
// earlier timestamp, so the epoch is the first millisecond the holder can mint with.
func leasesOf(ls []idkeeper.Lease, layout idkeeper.Layout) []wire.Lease {
	out := make([]wire.Lease, len(ls))
	for i, l := range ls {
		nb := l.NotBefore
		if nb.Before(layout.Epoch) {
			nb = layout.Epoch
		}
		out[i] = wire.Lease{NodeID: new(int64(l.NodeID)), NotBefore: wire.FormatTime(nb), ExpiresAt: wire.FormatTime(l.ExpiresAt),
			FencingToken: new(l.FencingToken), Receipt: l.Receipt}
	}
	return out
}
