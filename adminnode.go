package idkeeper

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/idkeeper/idkeeper/protocol"
)

// The registry's reads of single node IDs for the admin web (issue #10): one node's
// state, and the node IDs quarantined now, grouped by the end of their quarantine.
// They change nothing.

// StatusAt is the status the admin web shows for a node in state n at now (the
// store's clock): leased or grace when it holds a lease, else quarantined, cooling
// (its fenced watermark not passed yet) or free.
func (n NodeState) StatusAt(now time.Time) NodeStatus {
	switch {
	case n.Lease != nil && n.Lease.Expired(now):
		return NodeGrace
	case n.Lease != nil:
		return NodeLeased
	case n.QuarantinedUntil.After(now):
		return NodeQuarantined
	case !n.Fenced().Before(now):
		return NodeCooling
	}
	return NodeFree
}

// Node returns the state of node ID id as the store keeps it: its lease, if any,
// its watermark and floor, the end of its quarantine, its last fencing token and
// whether a receipt may restore it. Errors: NOT_FOUND for a node ID outside the
// pool, the 503s of Serving, STORE_UNAVAILABLE.
func (r *Registry) Node(ctx context.Context, id NodeID) (NodeState, error) {
	if err := r.Serving(); err != nil {
		return NodeState{}, err
	}
	notFound := func() error {
		p := r.cfg.Pool()
		return protocol.Errorf(protocol.CodeNotFound, "node ID %d is not in the pool of %d node IDs (%d to %d)", id, p.Nodes, p.First, p.End()-1)
	}
	if !r.cfg.Pool().Holds(id) {
		return NodeState{}, notFound()
	}
	st, err := r.store.Node(ctx, id)
	switch {
	case errors.Is(err, ErrNotFound):
		return NodeState{}, notFound() // the store's pool has not grown yet
	case err != nil:
		return NodeState{}, r.storeErr(err)
	}
	return st, nil
}

// QuarantineGroup is the node IDs whose quarantine ends at the same time.
type QuarantineGroup struct {
	Until time.Time
	Nodes []NodeID // ascending
}

// Ranges is the group's node IDs as runs of consecutive ones: "0-16,18-4095".
func (g QuarantineGroup) Ranges() string { return nodeRanges(g.Nodes).String() }

// Quarantined returns the node IDs quarantined at the store's now (free, not
// allocatable before their quarantine ends: after a store reset, a revocation or
// a node ID claimed twice), grouped by the end of their quarantine, the earliest
// end first, and that now. It reads the pool as PoolMap does, and every free node
// ID's state when some are quarantined or cooling. Errors: the 503s of Serving,
// STORE_UNAVAILABLE.
func (r *Registry) Quarantined(ctx context.Context) ([]QuarantineGroup, time.Time, error) {
	m, err := r.poolMap(ctx, true)
	if err != nil {
		return nil, time.Time{}, err
	}
	byEnd := map[time.Time][]NodeID{}
	for i, s := range m.Nodes {
		if s == NodeQuarantined {
			end := m.until[i]
			byEnd[end] = append(byEnd[end], m.First+NodeID(i))
		}
	}
	out := make([]QuarantineGroup, 0, len(byEnd))
	for end, ids := range byEnd {
		out = append(out, QuarantineGroup{Until: end, Nodes: ids})
	}
	slices.SortFunc(out, func(a, b QuarantineGroup) int { return a.Until.Compare(b.Until) })
	return out, m.Now, nil
}
