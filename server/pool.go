package server

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/internal/wire"
)

// CheckNewLayout checks the layout of a pool about to be created, at now: the
// epoch not after now and the range's end at least snowflake.MinLifetimeYears
// away (Layout.ValidateNew). The error is a *ConfigError naming --layout and
// --epoch.
func CheckNewLayout(spec idkeeper.PoolSpec, now time.Time) error {
	if err := spec.LayoutOrDefault().ValidateNew(now); err != nil {
		return configErrorf("--layout and --epoch: %v", err)
	}
	return nil
}

// PoolFlags is the command line that serves a store holding the pool spec: the
// flags --node-range, --layout and --epoch.
func PoolFlags(spec idkeeper.PoolSpec) string {
	l := spec.LayoutOrDefault()
	return fmt.Sprintf("--node-range %d-%d --layout %s --epoch %s", spec.First, spec.End()-1, l.Widths(),
		wire.FormatTime(l.Epoch))
}

// PoolMismatch is the error for a store whose pool (stored) has another node
// range or layout than the configuration asks for (asked): both specs, the
// flags that serve the store as it is, and that another range or layout needs a
// new store. It wraps the registry's POOL_MISMATCH Error.
func PoolMismatch(stored, asked idkeeper.PoolSpec) error {
	return fmt.Errorf("%w\nto serve this store, start with %s (a range may only grow upward from its first node ID); "+
		"for another node range or layout, initialise a new store (idkeeper init) for it",
		idkeeper.PoolMismatchError(stored, asked), PoolFlags(stored))
}

// InitPool initialises an empty store with the pool spec, as LeaseStore.Init
// says, after checking spec's layout as a new one (CheckNewLayout), and logs
// what it did. An initialised store it leaves as it is; one whose pool has
// another First or layout than spec's is an error (PoolMismatch) naming both.
func InitPool(ctx context.Context, s idkeeper.Store, spec idkeeper.PoolSpec, log *slog.Logger) (idkeeper.InitResult, error) {
	st, err := s.Status(ctx)
	if err != nil {
		return idkeeper.InitResult{}, fmt.Errorf("read the store: %w", err)
	}
	if st.Initialised {
		if st.Pool.Nodes > 0 && !st.Pool.SameSpace(spec) {
			return idkeeper.InitResult{Generation: st.Generation}, PoolMismatch(st.Pool, spec)
		}
		return idkeeper.InitResult{Generation: st.Generation}, nil
	}
	if err := CheckNewLayout(spec, time.Now()); err != nil {
		return idkeeper.InitResult{}, err
	}
	res, err := s.Init(ctx, spec)
	if err != nil {
		return res, fmt.Errorf("initialise the store: %w", err)
	}
	if res.Fresh {
		log.Info("initialised a new store", "generation", res.Generation.Number, "id", res.Generation.ID,
			"nodes", spec.Nodes, "nodeRange", fmt.Sprintf("%d-%d", spec.First, spec.End()-1), "layout", spec.LayoutOrDefault().String())
	}
	return res, nil
}
