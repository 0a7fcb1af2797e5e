// Package allowlist keeps the IP allow-list in force for API-key routes: a fixed
// floor from the command line and the entries the store keeps (Store), read
// again every DefaultRefresh so a change on one replica applies on all.
package allowlist

import (
	"context"
	"log/slog"
	"net/netip"
	"slices"
	"sync/atomic"
	"time"
)

// MaxNoteLen bounds Entry.Note, in bytes.
const MaxNoteLen = 200

// Entry is one entry of the IP allow-list kept in the store.
type Entry struct {
	Prefix    netip.Prefix // masked (Prefix.Masked), the identity of the entry
	Note      string       // why it is there; at most MaxNoteLen bytes
	CreatedBy string
	CreatedAt time.Time
}

// Store keeps the allow-list's entries; the admin web's store (account.Store)
// includes it. Errors: idkeeper.ErrNotFound and idkeeper.ErrConflict as stated.
type Store interface {
	// AddAllowEntry stores e (its Prefix masked); ErrConflict when that prefix is
	// listed already.
	AddAllowEntry(ctx context.Context, e Entry) error
	// RemoveAllowEntry deletes the entry of that prefix (masked first); ErrNotFound
	// when there is none.
	RemoveAllowEntry(ctx context.Context, p netip.Prefix) error
	// AllowEntries returns every entry, sorted by address then prefix length.
	AllowEntries(ctx context.Context) ([]Entry, error)
}

// Source is where an List reads the entries kept in the store
// (Store.AllowEntries).
type Source interface {
	AllowEntries(ctx context.Context) ([]Entry, error)
}

// DefaultRefresh is how often List.Run reads the store's entries by
// default: a change made on another replica applies here within it.
const DefaultRefresh = 10 * time.Second

// List is the IP allow-list in force for API-key routes: a floor of fixed
// prefixes (the --allowed-ips flag, which no operator can remove at run time) and
// the entries kept in the store, which Refresh reads. An address is allowed when a
// prefix of either contains it; when both are empty every address is allowed.
// Until the first Refresh succeeds the store's part is unknown, and only the floor
// allows (Loaded tells). It is safe for concurrent use.
type List struct {
	floor  []netip.Prefix
	src    Source
	stored atomic.Pointer[[]netip.Prefix]
}

// New returns the allow-list with floor and the entries of src (nil: the
// floor alone, loaded at once). It does no I/O.
func New(floor []netip.Prefix, src Source) *List {
	a := &List{floor: slices.Clone(floor), src: src}
	if src == nil {
		a.stored.Store(&[]netip.Prefix{})
	}
	return a
}

// Floor returns the fixed prefixes.
func (a *List) Floor() []netip.Prefix { return slices.Clone(a.floor) }

// Loaded reports whether the store's entries have been read at least once.
func (a *List) Loaded() bool { return a.stored.Load() != nil }

// Refresh reads the store's entries and puts them in force. On an error the
// entries read last stay in force.
func (a *List) Refresh(ctx context.Context) error {
	if a.src == nil {
		return nil
	}
	es, err := a.src.AllowEntries(ctx)
	if err != nil {
		return err
	}
	ps := make([]netip.Prefix, len(es))
	for i, e := range es {
		ps[i] = e.Prefix
	}
	a.stored.Store(&ps)
	return nil
}

// Allows reports whether addr may use the API-key routes. Before the first
// successful Refresh only the floor allows, and an empty floor allows nothing: an
// allow-list that cannot be read fails closed.
func (a *List) Allows(addr netip.Addr) bool {
	addr = addr.Unmap()
	for _, p := range a.floor {
		if p.Contains(addr) {
			return true
		}
	}
	stored := a.stored.Load()
	if stored == nil {
		return false
	}
	if len(a.floor) == 0 && len(*stored) == 0 {
		return true
	}
	for _, p := range *stored {
		if p.Contains(addr) {
			return true
		}
	}
	return false
}

// AllowsAll reports whether every address is allowed: the list is loaded and has
// no prefix at all. A request whose address cannot be told is allowed only then.
func (a *List) AllowsAll() bool {
	stored := a.stored.Load()
	return len(a.floor) == 0 && stored != nil && len(*stored) == 0
}

// Run refreshes the list every interval (0: DefaultRefresh) until ctx ends,
// logging failures to log at warn level.
func (a *List) Run(ctx context.Context, every time.Duration, log *slog.Logger) {
	if a.src == nil {
		return
	}
	if every <= 0 {
		every = DefaultRefresh
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := a.Refresh(ctx); err != nil && ctx.Err() == nil {
				log.Warn("cannot read the IP allow-list from the store; the last one read stays in force", "err", err)
			}
		}
	}
}
