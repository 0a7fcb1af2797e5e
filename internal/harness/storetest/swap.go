package storetest

import (
	"context"
	"sync"
	"time"

	"github.com/idkeeper/idkeeper"
)

// Swap is a Store whose backing store a test can replace while a registry runs
// over it: a bolt file swapped for an empty one is a lost volume, swapped for an
// older copy of itself a rollback (a restore of a stale backup, a failover to a
// replica that missed the latest writes). Create it with NewSwap.
type Swap struct {
	mu sync.RWMutex
	s  idkeeper.Store
}

// NewSwap returns a Swap in front of s.
func NewSwap(s idkeeper.Store) *Swap { return &Swap{s: s} }

func (w *Swap) cur() idkeeper.Store {
	w.mu.RLock()
	defer w.mu.RUnlock()
	return w.s
}

// Put puts s in place and returns the store it replaces.
func (w *Swap) Put(s idkeeper.Store) idkeeper.Store {
	w.mu.Lock()
	defer w.mu.Unlock()
	old := w.s
	w.s = s
	return old
}

func (w *Swap) Now(ctx context.Context) (time.Time, error) { return w.cur().Now(ctx) }
func (w *Swap) Status(ctx context.Context) (idkeeper.StoreStatus, error) {
	return w.cur().Status(ctx)
}
func (w *Swap) Init(ctx context.Context, p idkeeper.PoolSpec) (idkeeper.InitResult, error) {
	return w.cur().Init(ctx, p)
}
func (w *Swap) Grow(ctx context.Context, g idkeeper.Guard, p idkeeper.PoolSpec) error {
	return w.cur().Grow(ctx, g, p)
}
func (w *Swap) Reset(ctx context.Context, p idkeeper.ResetParams) (idkeeper.ResetResult, error) {
	return w.cur().Reset(ctx, p)
}
func (w *Swap) Alloc(ctx context.Context, g idkeeper.Guard, p idkeeper.AllocParams) (idkeeper.Grant, error) {
	return w.cur().Alloc(ctx, g, p)
}
func (w *Swap) Renew(ctx context.Context, g idkeeper.Guard, p idkeeper.RenewParams) (idkeeper.Grant, error) {
	return w.cur().Renew(ctx, g, p)
}
func (w *Swap) Remove(ctx context.Context, g idkeeper.Guard, p idkeeper.RemoveParams) (int, error) {
	return w.cur().Remove(ctx, g, p)
}
func (w *Swap) Reclaim(ctx context.Context, g idkeeper.Guard, grace time.Duration) (int, error) {
	return w.cur().Reclaim(ctx, g, grace)
}
func (w *Swap) Quarantine(ctx context.Context, g idkeeper.Guard, until time.Time, n ...idkeeper.NodeID) error {
	return w.cur().Quarantine(ctx, g, until, n...)
}
func (w *Swap) RevokeLease(ctx context.Context, g idkeeper.Guard, n idkeeper.NodeID, token uint64, grace time.Duration) (idkeeper.Lease, error) {
	return w.cur().RevokeLease(ctx, g, n, token, grace)
}
func (w *Swap) Counts(ctx context.Context) (idkeeper.Counts, error) { return w.cur().Counts(ctx) }
func (w *Swap) Leases(ctx context.Context) ([]idkeeper.Lease, error) {
	return w.cur().Leases(ctx)
}
func (w *Swap) Node(ctx context.Context, id idkeeper.NodeID) (idkeeper.NodeState, error) {
	return w.cur().Node(ctx, id)
}
func (w *Swap) KeyHoldings(ctx context.Context) (map[string]int, error) {
	return w.cur().KeyHoldings(ctx)
}
func (w *Swap) TryLock(ctx context.Context, name, owner string, d time.Duration) (idkeeper.Lock, bool, error) {
	return w.cur().TryLock(ctx, name, owner, d)
}
func (w *Swap) Unlock(ctx context.Context, name, owner string, d time.Duration) (bool, error) {
	return w.cur().Unlock(ctx, name, owner, d)
}
func (w *Swap) Locks(ctx context.Context) ([]idkeeper.Lock, error) { return w.cur().Locks(ctx) }
func (w *Swap) CreateAPIKey(ctx context.Context, k idkeeper.APIKey) error {
	return w.cur().CreateAPIKey(ctx, k)
}
func (w *Swap) APIKey(ctx context.Context, id string) (idkeeper.APIKey, error) {
	return w.cur().APIKey(ctx, id)
}
func (w *Swap) APIKeys(ctx context.Context) ([]idkeeper.APIKey, error) {
	return w.cur().APIKeys(ctx)
}
func (w *Swap) RevokeAPIKey(ctx context.Context, id string, at time.Time) error {
	return w.cur().RevokeAPIKey(ctx, id, at)
}
func (w *Swap) TouchAPIKey(ctx context.Context, id string, at time.Time) error {
	return w.cur().TouchAPIKey(ctx, id, at)
}
func (w *Swap) UpdateAPIKey(ctx context.Context, id string, u idkeeper.KeyUpdate) (idkeeper.APIKey, error) {
	return w.cur().UpdateAPIKey(ctx, id, u)
}
func (w *Swap) RecordSkew(ctx context.Context, o idkeeper.SkewObservation, ttl time.Duration) error {
	return w.cur().RecordSkew(ctx, o, ttl)
}
func (w *Swap) SkewObservations(ctx context.Context) ([]idkeeper.SkewObservation, error) {
	return w.cur().SkewObservations(ctx)
}
func (w *Swap) Ping(ctx context.Context) error { return w.cur().Ping(ctx) }
func (w *Swap) Close() error                   { return w.cur().Close() }

func (w *Swap) LeaseAt(ctx context.Context, n idkeeper.NodeID, t time.Time) ([]idkeeper.HistoryRecord, error) {
	return w.cur().LeaseAt(ctx, n, t)
}
func (w *Swap) NodeHistory(ctx context.Context, n idkeeper.NodeID, before uint64, limit int) ([]idkeeper.HistoryRecord, error) {
	return w.cur().NodeHistory(ctx, n, before, limit)
}
func (w *Swap) PruneHistory(ctx context.Context, before time.Time, limit int) (int, error) {
	return w.cur().PruneHistory(ctx, before, limit)
}
func (w *Swap) HistoryCount(ctx context.Context) (int, error) { return w.cur().HistoryCount(ctx) }

// KeyCooling implements idkeeper.LeaseStore.
func (w *Swap) KeyCooling(ctx context.Context) (map[string]int, error) {
	return w.cur().KeyCooling(ctx)
}
