package admin

import (
	"net/http"
	"strconv"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/internal/wire"
	"github.com/idkeeper/idkeeper/protocol"
	"github.com/idkeeper/idkeeper/snowflake"
)

// origin answers which lease minted an ID (Registry.Origin): GET
// /admin/api/ids/{id}/origin, the ID in decimal, or in the JSON string form
// with its double quotes (percent-encoded).
func (h *Handler) origin(_ http.ResponseWriter, r *http.Request, _ *principal) (any, error) {
	if _, err := query(r); err != nil {
		return nil, err
	}
	id, err := snowflake.ParseID(r.PathValue("id"))
	if err != nil {
		return nil, protocol.Invalidf("id", "the ID in the path must be a decimal ID (digits, at most %d): %v", int64(1<<63-1), err)
	}
	o, err := h.reg.Origin(r.Context(), id)
	if err != nil {
		return nil, err
	}
	return originJSON(o, h.reg.Layout()), nil
}

// originJSON is o as the admin API answers it. A notBefore before the layout's
// epoch (a node ID's first grant) is shown as the epoch, as Alloc answers it.
func originJSON(o idkeeper.IDOrigin, layout idkeeper.Layout) wire.IDOrigin {
	out := wire.IDOrigin{ID: strconv.FormatInt(o.ID, 10), Note: o.Note, Leases: []wire.OriginLease{},
		Decoded: wire.OriginDecoded{Time: wire.FormatTime(o.Parts.Time), TimestampMs: o.Parts.Timestamp, NodeID: o.Parts.Node,
			Sequence: o.Parts.Sequence}}
	for _, h := range o.Leases {
		if h.NotBefore.Before(layout.Epoch) {
			h.NotBefore = layout.Epoch
		}
		l := wire.OriginLease{NodeID: int64(h.NodeID), FencingToken: h.Token, KeyID: h.KeyID,
			Requester: wire.Requester{MachineID: h.Requester.MachineID, PID: h.Requester.PID,
				StartedAt: wire.FormatTime(h.Requester.StartedAt), Instance: h.Requester.Instance},
			GrantedAt: wire.FormatTime(h.GrantedAt), NotBefore: wire.FormatTime(h.NotBefore), WindowEnd: wire.FormatTime(h.WindowEnd),
			End: string(h.End), FromReceipt: h.FromReceipt}
		if !h.Client.IsZero() {
			l.Client = &wire.Client{Host: h.Client.Host, Labels: h.Client.Labels}
		}
		if !h.EndedAt.IsZero() {
			l.EndedAt = wire.FormatTime(h.EndedAt)
		}
		if !h.MintedUpTo.IsZero() {
			l.MintedUpTo = wire.FormatTime(h.MintedUpTo)
		}
		out.Leases = append(out.Leases, l)
	}
	return out
}
