package idkeeper

import (
	"context"
	"fmt"
	"time"

	"github.com/idkeeper/idkeeper/protocol"
	"github.com/idkeeper/idkeeper/snowflake"
)

// IDOrigin answers "which process minted this ID" (issue #16) from the lease
// history.
type IDOrigin struct {
	ID    int64
	Parts snowflake.Parts // the ID decoded with the registry's layout
	// Leases are the grants whose window holds the ID's millisecond on its node
	// ID: one, or none. Two or more only for a node ID two holders contested
	// (both listed: either may have minted it).
	Leases []HistoryRecord
	// Note says why Leases is empty; "" otherwise.
	Note string
}

// historyPruneBatch and historyPruneBatches bound one run of the retention job
// over the lease history; the next run goes on.
const (
	historyPruneBatch   = 1000
	historyPruneBatches = 100
)

// Origin decodes id with the registry's layout and looks up the lease that held
// its node ID at its millisecond. Errors: INVALID_REQUEST (field "id") for a
// negative id; STORE_UNAVAILABLE. It reads only, and needs no verified clock.
func (r *Registry) Origin(ctx context.Context, id int64) (IDOrigin, error) {
	if id < 0 {
		return IDOrigin{}, protocol.Invalidf("id", "an ID is a non-negative 63-bit integer, not %d", id)
	}
	parts, err := r.cfg.Layout.Decode(id)
	if err != nil {
		return IDOrigin{}, protocol.Invalidf("id", "%v", err)
	}
	o := IDOrigin{ID: id, Parts: parts}
	if p, ok := r.Pool(ctx); ok && (parts.Node < int64(p.First) || parts.Node >= int64(p.End())) {
		o.Note = fmt.Sprintf("node ID %d lies outside this registry's pool of %d node IDs (%d-%d): none of its leases minted it",
			parts.Node, p.Nodes, p.First, p.End()-1)
		return o, nil
	}
	hs, err := r.store.LeaseAt(ctx, NodeID(parts.Node), parts.Time)
	if err != nil {
		return IDOrigin{}, r.storeErr(err)
	}
	o.Leases = hs
	if len(hs) > 0 {
		return o, nil
	}
	now := r.cfg.Clock()
	switch {
	case parts.Time.After(now):
		o.Note = fmt.Sprintf("no lease known: its time %s lies in the future", parts.Time.Format(time.RFC3339Nano))
	case parts.Time.Before(now.Add(-r.cfg.HistoryRetention)):
		o.Note = fmt.Sprintf("no lease known: its time lies before the history's retention (%s), or its lease ended longer ago",
			r.cfg.HistoryRetention)
	default:
		o.Note = fmt.Sprintf("no lease known: no grant this store remembers held node ID %d at that millisecond "+
			"(not minted by a lease of this registry, a grant older than the history, or one the store lost)", parts.Node)
	}
	return o, nil
}

// Pool returns the pool the store reports (its First, size and layout); ok is
// false when the store cannot say (not initialised, unreachable).
func (r *Registry) Pool(ctx context.Context) (PoolSpec, bool) {
	st, err := r.store.Status(ctx)
	if err != nil || !st.Initialised || st.Pool.Nodes == 0 {
		return PoolSpec{}, false
	}
	return st.Pool, true
}

// pruneHistory deletes the lease history records that ended more than
// Config.HistoryRetention ago, in batches.
func (r *Registry) pruneHistory(ctx context.Context) (int, error) {
	before := r.cfg.Clock().Add(-r.cfg.HistoryRetention)
	total := 0
	for range historyPruneBatches {
		n, err := r.store.PruneHistory(ctx, before, historyPruneBatch)
		total += n
		if err != nil || n < historyPruneBatch {
			return total, err
		}
	}
	return total, nil
}
