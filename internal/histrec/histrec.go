// Package histrec is the lease history record as the stores that keep Go-side
// records hold it (bolt, etcd): its JSON form, its conversions, and the rule for a
// grant learned from a claim (idkeeper.HistoryStore). Times are Unix milliseconds.
package histrec

import (
	"encoding/json"
	"fmt"
	"maps"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/protocol"
)

// Rec is a stored history record; times in Unix ms, zero values omitted.
type Rec struct {
	Machine     string            `json:"m"`
	PID         int               `json:"p"`
	Started     int64             `json:"s"`
	Instance    string            `json:"i,omitempty"`
	KeyID       string            `json:"k"`
	Host        string            `json:"h,omitempty"`
	Labels      map[string]string `json:"l,omitempty"`
	GrantedAt   int64             `json:"g"`
	NotBefore   int64             `json:"nb"`
	WindowEnd   int64             `json:"we"`
	End         string            `json:"e,omitempty"`
	EndedAt     int64             `json:"ea,omitempty"`
	MintedUpTo  int64             `json:"mu,omitempty"`
	FromReceipt bool              `json:"r,omitempty"`
}

// Of is h as stored.
func Of(h idkeeper.HistoryRecord) Rec {
	r := Rec{Machine: h.Requester.MachineID, PID: h.Requester.PID, Started: timeMs(h.Requester.StartedAt),
		Instance: h.Requester.Instance, KeyID: h.KeyID, Host: h.Client.Host, Labels: maps.Clone(h.Client.Labels),
		GrantedAt: timeMs(h.GrantedAt), NotBefore: timeMs(h.NotBefore), WindowEnd: timeMs(h.WindowEnd),
		End: string(h.End), FromReceipt: h.FromReceipt}
	if !h.EndedAt.IsZero() {
		r.EndedAt = timeMs(h.EndedAt)
	}
	if !h.MintedUpTo.IsZero() {
		r.MintedUpTo = timeMs(h.MintedUpTo)
	}
	return r
}

// Record is r as the record of (node, token).
func (r Rec) Record(node uint32, token uint64) idkeeper.HistoryRecord {
	h := idkeeper.HistoryRecord{NodeID: idkeeper.NodeID(node), Token: token,
		Requester: idkeeper.Requester{MachineID: r.Machine, PID: r.PID, StartedAt: msTime(r.Started), Instance: r.Instance},
		KeyID:     r.KeyID, Client: idkeeper.ClientInfo{Host: r.Host, Labels: r.Labels},
		GrantedAt: msTime(r.GrantedAt), NotBefore: msTime(r.NotBefore), WindowEnd: msTime(r.WindowEnd),
		End: idkeeper.LeaseEnd(r.End), FromReceipt: r.FromReceipt}
	if r.EndedAt != 0 {
		h.EndedAt = msTime(r.EndedAt)
	}
	if r.MintedUpTo != 0 {
		h.MintedUpTo = msTime(r.MintedUpTo)
	}
	return h
}

// Claim returns the record of a grant learned from claim c (idkeeper.HistoryStore,
// Renew): old is the record of (c.NodeID, c.Token) when there is one, nil
// otherwise (a new one FromReceipt: req and keyID's, granted at now, the claim's
// NotBefore). A restore (restoredExp, the restored lease's expiry) reopens it; a
// contest (restoredExp nil) ends it contested at now, its window at least the
// claim's.
func Claim(old *Rec, c idkeeper.Claim, req idkeeper.Requester, keyID string, now int64, restoredExp *int64) Rec {
	var r Rec
	if old != nil {
		r = *old
	} else {
		r = Of(idkeeper.HistoryRecord{Requester: req, KeyID: keyID, GrantedAt: msTime(now),
			NotBefore: c.NotBefore, WindowEnd: protocol.Millis(c.NotBefore).Add(-time.Millisecond), FromReceipt: true})
	}
	if restoredExp != nil {
		r.WindowEnd, r.End, r.EndedAt, r.MintedUpTo = *restoredExp, "", 0, 0
	} else {
		r.WindowEnd, r.End, r.EndedAt, r.MintedUpTo = max(r.WindowEnd, timeMs(c.ExpiresAt)), string(idkeeper.EndContested), now, 0
	}
	return r
}

func msTime(ms int64) time.Time { return time.UnixMilli(ms).UTC() }
func timeMs(t time.Time) int64  { return protocol.Millis(t).UnixMilli() }

// Table is one store transaction's lease history: the record of (node, token)
// read, and written with the record as it was (old, nil: none), so that the
// store can keep its indexes in step.
type Table interface {
	Get(node uint32, token uint64) (Rec, bool, error)
	Put(node uint32, token uint64, r Rec, old *Rec) error
}

// Log writes the history of the lease events of one transaction, at Now (Unix
// ms), to T: the one implementation bolt and etcd share.
type Log struct {
	T   Table
	Now int64
}

// Grant records the new grant l with what its client reported.
func (g Log) Grant(l idkeeper.Lease, c idkeeper.ClientInfo) error {
	r := Of(idkeeper.HistoryRecord{Requester: l.Requester, KeyID: l.KeyID, Client: c, GrantedAt: l.GrantedAt,
		NotBefore: l.NotBefore, WindowEnd: l.ExpiresAt})
	return g.T.Put(uint32(l.NodeID), l.FencingToken, r, nil)
}

// Edit applies fn to the record of (node, token), when there is one.
func (g Log) Edit(node uint32, token uint64, fn func(r *Rec)) error {
	r, ok, err := g.T.Get(node, token)
	if err != nil || !ok {
		return err
	}
	old := r
	fn(&r)
	return g.T.Put(node, token, r, &old)
}

// Extend sets the window end of the lease of (node, token) to its expiry exp.
func (g Log) Extend(node uint32, token uint64, exp int64) error {
	return g.Edit(node, token, func(r *Rec) { r.WindowEnd = exp })
}

// End ends the record of (node, token) at Now.
func (g Log) End(node uint32, token uint64, end idkeeper.LeaseEnd) error {
	return g.Edit(node, token, func(r *Rec) { r.End, r.EndedAt = string(end), g.Now })
}

// Claim records a grant learned from a claim: held again (restoredExp, the
// restored lease's expiry), or contested (restoredExp nil) and ended at once.
func (g Log) Claim(c idkeeper.Claim, req idkeeper.Requester, keyID string, restoredExp *int64) error {
	node := uint32(c.NodeID)
	r, ok, err := g.T.Get(node, c.Token)
	if err != nil {
		return err
	}
	if !ok {
		return g.T.Put(node, c.Token, Claim(nil, c, req, keyID, g.Now, restoredExp), nil)
	}
	return g.T.Put(node, c.Token, Claim(&r, c, req, keyID, g.Now, restoredExp), &r)
}

// Raw is one store transaction's history as JSONTable keeps it: each record's
// JSON under (node, token), and an index entry per ended record under (endedAt,
// node, token). Reads see the transaction's own writes.
type Raw interface {
	// GetJSON reads the record of (node, token); ok is false when there is none.
	GetJSON(node uint32, token uint64) (v []byte, ok bool, err error)
	PutJSON(node uint32, token uint64, v []byte) error
	PutEnded(endedAt int64, node uint32, token uint64) error
	DeleteEnded(endedAt int64, node uint32, token uint64) error
}

// JSONTable is the Table of a store that keeps Rec as its JSON (the tags of
// Rec: the stored format) beside an index of the ended records, which Put keeps
// in step.
type JSONTable struct{ Raw Raw }

// Get implements Table.
func (j JSONTable) Get(node uint32, token uint64) (Rec, bool, error) {
	v, ok, err := j.Raw.GetJSON(node, token)
	if err != nil || !ok {
		return Rec{}, false, err
	}
	var r Rec
	if err := json.Unmarshal(v, &r); err != nil {
		return Rec{}, false, fmt.Errorf("history record of node %d token %d: %w", node, token, err)
	}
	return r, true, nil
}

// Put implements Table: old's ended entry, when it has one, goes; r's, when
// it has one, comes.
func (j JSONTable) Put(node uint32, token uint64, r Rec, old *Rec) error {
	if old != nil && old.End != "" {
		if err := j.Raw.DeleteEnded(old.EndedAt, node, token); err != nil {
			return err
		}
	}
	if r.End != "" {
		if err := j.Raw.PutEnded(r.EndedAt, node, token); err != nil {
			return err
		}
	}
	v, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return j.Raw.PutJSON(node, token, v)
}

// CheckPage checks the arguments of a history page (idkeeper.HistoryStore.NodeHistory):
// limit as idkeeper.CheckHistoryLimit does, and whether node can have a
// history at all (ok false: outside the uint32 node IDs, an empty page).
func CheckPage(node idkeeper.NodeID, limit int) (ok bool, err error) {
	if err := idkeeper.CheckHistoryLimit(limit, idkeeper.MaxHistoryPage); err != nil {
		return false, err
	}
	return node >= 0 && int64(node) <= int64(^uint32(0)), nil
}
