package http

import (
	"time"

	"github.com/idkeeper/idkeeper"
)

// TimeFormat is the layout of every time the API sends: RFC 3339 in UTC with
// milliseconds, e.g. "2026-01-01T00:00:00.000Z".
const TimeFormat = "2006-01-02T15:04:05.000Z07:00"

// formatTime renders t in TimeFormat, in UTC.
func formatTime(t time.Time) string { return t.UTC().Format(TimeFormat) }

type layoutJSON struct {
	Epoch         string `json:"epoch"`
	TimestampBits int    `json:"timestampBits"`
	NodeBits      int    `json:"nodeBits"`
	SequenceBits  int    `json:"sequenceBits"`
}

func layoutOf(l idkeeper.Layout) layoutJSON {
	return layoutJSON{Epoch: formatTime(l.Epoch), TimestampBits: l.TimestampBits, NodeBits: l.NodeBits, SequenceBits: l.SequenceBits}
}

type leaseJSON struct {
	NodeID       idkeeper.NodeID `json:"nodeId"`
	NotBefore    string          `json:"notBefore"`
	ExpiresAt    string          `json:"expiresAt"`
	FencingToken uint64          `json:"fencingToken"`
	Receipt      string          `json:"receipt,omitempty"`
}

// leasesOf never returns nil: an empty list is sent as [], the definite "holds
// nothing" answer of Renew. A NotBefore before the layout's epoch (a node ID never
// used, whose watermark is the zero time) is sent as the epoch: no ID can carry an
// earlier timestamp, so the epoch is the first millisecond the holder can mint with.
func leasesOf(ls []idkeeper.Lease, layout idkeeper.Layout) []leaseJSON {
	out := make([]leaseJSON, len(ls))
	for i, l := range ls {
		nb := l.NotBefore
		if nb.Before(layout.Epoch) {
			nb = layout.Epoch
		}
		out[i] = leaseJSON{NodeID: l.NodeID, NotBefore: formatTime(nb), ExpiresAt: formatTime(l.ExpiresAt),
			FencingToken: l.FencingToken, Receipt: l.Receipt}
	}
	return out
}

type allocResponse struct {
	Layout       layoutJSON  `json:"layout"`
	Leases       []leaseJSON `json:"leases"`
	ServerUtcNow string      `json:"serverUtcNow"`
}

type renewResponse struct {
	Leases       []leaseJSON `json:"leases"`
	ServerUtcNow string      `json:"serverUtcNow"`
}

type removeResponse struct {
	Removed int `json:"removed"`
}

type remainingResponse struct {
	Total       int `json:"total"`
	Remaining   int `json:"remaining"`
	Leased      int `json:"leased"`
	InGrace     int `json:"inGrace"`
	Quarantined int `json:"quarantined"`
}

type versionResponse struct {
	Version string     `json:"version"`
	Commit  string     `json:"commit"`
	Layout  layoutJSON `json:"layout"`
}

type statusResponse struct {
	Status string `json:"status"`
}

// readyResponse is the 200 body of /readyz.
type readyResponse struct {
	Status     string         `json:"status"`
	Generation generationJSON `json:"generation"`
	Durability string         `json:"durability,omitempty"`
}

type generationJSON struct {
	Number uint64 `json:"number"`
	ID     string `json:"id"`
	Origin string `json:"origin"`
	At     string `json:"at"`
}
