package backup

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/internal/shortlease"
	"github.com/idkeeper/idkeeper/protocol"
	"github.com/idkeeper/idkeeper/snapshot"
)

// Summary tells what an export or import moved.
type Summary struct {
	Header Header // the file's header: its source store, generation, meta, time taken
	Counts Counts
	Bytes  int64  // bytes of the file's content (uncompressed), trailer included
	SHA256 string // the checksum of the trailer (hex)

	// Import only.
	Generation idkeeper.Generation // the store's new generation (origin recovered)
	Fence      uint64              // the store's fencing counter afterwards
	// Until is when the quarantine ends: import time + lease duration + grace. Every
	// node ID's watermark floor is raised to it too.
	Until time.Time
	// Quarantined are the node IDs free in the backup, quarantined until Until: a
	// process may have been given one after the backup was taken.
	Quarantined NodeRanges
	// Kept are the node IDs leased in the backup: their leases keep their expiry,
	// their holders keep minting and renew with their receipts; each is quarantined
	// until Until when it is freed. Live of them had not expired at import time.
	Kept NodeRanges
	Live int
}

// NodeRange is the node IDs First..Last.
type NodeRange struct{ First, Last idkeeper.NodeID }

func (r NodeRange) String() string {
	if r.First == r.Last {
		return strconv.Itoa(int(r.First))
	}
	return strconv.Itoa(int(r.First)) + "-" + strconv.Itoa(int(r.Last))
}

// NodeRanges are sorted, disjoint, non-adjacent ranges of node IDs.
type NodeRanges []NodeRange

// add appends id, which must be above every node ID already in rs.
func (rs *NodeRanges) add(id idkeeper.NodeID) {
	if n := len(*rs); n > 0 && (*rs)[n-1].Last+1 == id {
		(*rs)[n-1].Last = id
		return
	}
	*rs = append(*rs, NodeRange{id, id})
}

// Count is how many node IDs rs covers.
func (rs NodeRanges) Count() int {
	n := 0
	for _, r := range rs {
		n += int(r.Last-r.First) + 1
	}
	return n
}

// Contains reports whether id is in rs.
func (rs NodeRanges) Contains(id idkeeper.NodeID) bool {
	for _, r := range rs {
		if r.First <= id && id <= r.Last {
			return true
		}
	}
	return false
}

// String is "0-99,105,107-110"; "none" when empty.
func (rs NodeRanges) String() string {
	if len(rs) == 0 {
		return "none"
	}
	s := make([]string, len(rs))
	for i, r := range rs {
		s[i] = r.String()
	}
	return strings.Join(s, ",")
}

// Option changes how Export and Import run.
type Option func(*options)

type options struct {
	progress func(records int)
	// shortLeases lets PlanFor and Import take a lease duration down to 1 s, as the
	// servers of the fault-injection suite run with (internal/shortlease): the
	// option is reachable only from this module, for the hidden
	// --unsafe-short-leases of `idkeeper backup import`. Never in production.
	shortLeases bool
}

func init() {
	shortlease.InstallImport(Option(func(o *options) { o.shortLeases = true }))
}

// WithProgress calls fn after every record with the number of records so far.
func WithProgress(fn func(records int)) Option { return func(o *options) { o.progress = fn } }

func collect(opts []Option) options {
	var o options
	for _, f := range opts {
		f(&o)
	}
	if o.progress == nil {
		o.progress = func(int) {}
	}
	return o
}

// Export writes the snapshot of s to w (a Writer: header, records, trailer) and
// returns what it wrote. The records stream: none is held longer than it takes
// to write it. It fails when s is not initialised (STORE_NOT_INITIALISED), when s
// fails, or when a record would make a file that Import refuses (out of bounds,
// out of order, a token above the fencing counter: a store read while it
// changed); w then holds part of a file, without its trailer, which Import
// refuses — write to a temporary file and rename it only on success.
func Export(ctx context.Context, s snapshot.Store, w io.Writer, info Source, opts ...Option) (Summary, error) {
	o := collect(opts)
	bw := NewWriter(w, info)
	n := 0
	err := s.ReadSnapshot(ctx, bw.WriteMeta, func(rec snapshot.Record) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := bw.WriteRecord(rec); err != nil {
			return err
		}
		n++
		o.progress(n)
		return nil
	})
	if err == nil {
		err = bw.Close()
	}
	if err != nil {
		return bw.Summary(), err
	}
	return bw.Summary(), nil
}

// StatusReader is the part of an idkeeper.Store that PlanFor reads.
type StatusReader interface {
	Status(ctx context.Context) (idkeeper.StoreStatus, error)
}

// PlanFor returns the plan of an import into s at now, with the registry's lease
// duration and grace — those of the servers that ran and will run on the
// deployment (--lease-duration, --cleanup-grace): they bound how long a process
// that held a node ID after the backup was taken may still mint. Now is the later
// of now and the store's clock; LiveFence and LiveGeneration are the store's
// fencing counter and generation number (0 and 0 when it is not initialised).
func PlanFor(ctx context.Context, s StatusReader, now time.Time, lease, grace time.Duration, opts ...Option) (snapshot.RestorePlan, error) {
	if err := checkDurations(lease, grace, collect(opts).shortLeases); err != nil {
		return snapshot.RestorePlan{}, err
	}
	st, err := s.Status(ctx)
	if err != nil {
		return snapshot.RestorePlan{}, fmt.Errorf("read the target store's status: %w", err)
	}
	if st.Now.After(now) {
		now = st.Now
	}
	p := snapshot.RestorePlan{Now: protocol.Millis(now).UTC(), LeaseDuration: lease, Grace: grace}
	if st.Initialised {
		p.LiveFence, p.LiveGeneration = st.Fence, st.Generation.Number
	}
	return p, nil
}

func checkDurations(lease, grace time.Duration, short bool) error {
	minLease := idkeeper.MinFirstLease
	if short {
		minLease = time.Second
	}
	switch {
	case lease < minLease || lease > idkeeper.MaxLeaseDuration:
		return fmt.Errorf("backup: a lease duration of %v is outside %v..%v: give the servers' --lease-duration", lease, minLease, idkeeper.MaxLeaseDuration)
	case grace < 0 || grace > idkeeper.MaxGrace:
		return fmt.Errorf("backup: a grace of %v is outside 0s..%v: give the servers' --cleanup-grace", grace, idkeeper.MaxGrace)
	}
	return nil
}

// Import replaces the whole state of s with the backup r, made safe by plan
// (PlanFor): the generation is new (number above the backup's and the store's,
// origin recovered), so every registry that adopted a generation treats the
// import as a store reset; the fencing counter resumes above every token the
// backup or the store knew; every node ID's quarantine and watermark floor are
// raised to plan.Until() (never lowered) and every node is restorable, so the
// holder of a lease granted after the backup keeps it with its receipt while
// nobody else gets the node ID before any window it may have had ends; leases in
// the backup keep their expiry. Records stream from r through the Reader into
// s.LoadSnapshot, all or nothing: a file that is damaged, truncated, of a newer
// format or not a backup at all fails the load and s is left as it was; a
// redacted one (ErrRedacted) is refused before the load.
func Import(ctx context.Context, s snapshot.Store, r io.Reader, plan snapshot.RestorePlan, opts ...Option) (Summary, error) {
	o := collect(opts)
	if plan.Now.IsZero() {
		return Summary{}, errors.New("backup: the restore plan has no time (PlanFor)")
	}
	if err := checkDurations(plan.LeaseDuration, plan.Grace, o.shortLeases); err != nil {
		return Summary{}, err
	}
	rd, err := NewReader(r)
	if err != nil {
		return Summary{}, err
	}
	if err := CheckRestorable(rd.Header()); err != nil {
		return Summary{}, err
	}
	meta := plan.SafeMeta(rd.Header().Meta)
	src := &importSource{ctx: ctx, rd: rd, plan: plan, progress: o.progress}
	if err := s.LoadSnapshot(ctx, meta, src); err != nil {
		return rd.Summary(), err
	}
	sum := rd.Summary()
	if sum.SHA256 == "" {
		// The store returned before the Reader reached the trailer: a store that
		// broke the snapshot.Source contract. Say so rather than report success.
		return sum, errors.New("backup: the store ended the load before the end of the file")
	}
	sum.Generation, sum.Fence, sum.Until = meta.Generation, meta.Fence, plan.Until()
	sum.Quarantined, sum.Kept, sum.Live = src.free, src.held, src.live
	return sum, nil
}

// importSource is the Reader as the store sees it: every record made safe by
// the plan, the free and held node IDs noted for the summary.
type importSource struct {
	ctx        context.Context
	rd         *Reader
	plan       snapshot.RestorePlan
	progress   func(int)
	n          int
	free, held NodeRanges
	live       int
}

func (s *importSource) Next() (snapshot.Record, error) {
	if err := s.ctx.Err(); err != nil {
		return snapshot.Record{}, err
	}
	rec, err := s.rd.Next()
	if err != nil {
		return rec, err
	}
	if n := rec.Node; n != nil {
		if n.Lease == nil {
			s.free.add(n.NodeID)
		} else {
			s.held.add(n.NodeID)
			if !n.Lease.Expired(s.plan.Now) {
				s.live++
			}
		}
	}
	s.n++
	s.progress(s.n)
	return s.plan.SafeRecord(rec), nil
}
