package admin

import (
	"context"
	"html/template"
	"net/http"
	"strconv"
	"time"

	"github.com/idkeeper/idkeeper"
	"github.com/idkeeper/idkeeper/audit"
	"github.com/idkeeper/idkeeper/internal/wire"
)

// The store's health (GET /admin/api/store, and the store page's data): phase,
// generation, the pool (node range and layout), the last reset with the node IDs
// quarantined and the leases restored since, the job locks and this replica's
// last job runs.

// MaxRestoredShown bounds the lease.restore entries of the last reset that the
// store's health lists; the others are counted.
const MaxRestoredShown = 50

// resetReport is what the server knows of the last store reset.
type resetReport struct {
	At            time.Time
	Generation    uint64
	QuarantineEnd time.Time
	Why           string // "": another replica recovered it, or this one before its restart
	// Quarantined are the node IDs quarantined at QuarantinedAt, by the end of
	// their quarantine; QuarantinedErr when they could not be read.
	Quarantined    []idkeeper.QuarantineGroup
	QuarantinedAt  time.Time
	QuarantinedErr error
	// Restored are the lease.restore entries since the reset, newest first (at
	// most MaxRestoredShown); RestoredMore counts the others. RestoredComplete is
	// false when the log was not read back to the reset (MaxAuditScan entries).
	Restored         []audit.Entry
	RestoredMore     int
	RestoredComplete bool
	RestoredErr      error
}

// resetReport reads what the page and the API show of the last reset of s: nil
// when the generation served did not begin with a recovery.
func (h *Handler) resetReport(ctx context.Context, s idkeeper.StoreHealth) *resetReport {
	g := s.Adopted
	if g.Origin != idkeeper.OriginRecovered {
		return nil
	}
	cfg := h.reg.Config()
	rep := &resetReport{At: g.At, Generation: g.Number, QuarantineEnd: g.At.Add(cfg.LeaseDuration + cfg.Grace)}
	if rr := s.Recovered; rr != nil && rr.Generation.ID == g.ID {
		rep.Why, rep.QuarantineEnd = rr.Why, rr.Until
	}
	rep.Quarantined, rep.QuarantinedAt, rep.QuarantinedErr = h.reg.Quarantined(ctx)
	rep.Restored, rep.RestoredMore, rep.RestoredComplete, rep.RestoredErr = h.restoredSince(ctx, g.At)
	for _, err := range []error{rep.QuarantinedErr, rep.RestoredErr} {
		if err != nil {
			h.log.Warn("read the last reset's quarantine and restored leases", "err", err)
		}
	}
	return rep
}

// restoredSince reads the audit log back from its newest entry to since, at most
// MaxAuditScan entries, for the lease.restore entries (leases restored from
// receipts, node IDs contested): the first MaxRestoredShown, and how many more.
// complete is false when it stopped at MaxAuditScan before since.
func (h *Handler) restoredSince(ctx context.Context, since time.Time) (list []audit.Entry, more int, complete bool, err error) {
	var before uint64
	for scanned := 0; scanned < MaxAuditScan; {
		n := min(MaxAuditLimit, MaxAuditScan-scanned)
		es, err := h.store.AuditEntriesBefore(ctx, before, n)
		if err != nil {
			return list, more, false, storeErr(err)
		}
		scanned += len(es)
		for _, e := range es {
			before = e.Seq
			switch {
			case e.At.Before(since):
				return list, more, true, nil
			case e.Action != audit.LeaseRestore:
			case len(list) < MaxRestoredShown:
				list = append(list, e)
			default:
				more++
			}
		}
		if len(es) < n || before <= 1 {
			return list, more, true, nil // the log's start
		}
	}
	return list, more, false, nil
}

// storePool is the store's pool as the store page and GET /admin/api/store show
// it (issue #22): the stored spec, its Layout never zero (LayoutOrDefault: a
// store initialised before layouts were stored is on DefaultLayout).
type storePool struct {
	idkeeper.PoolSpec
}

// newStorePool is the pool of st, nil when the store holds none (Nodes 0: not
// initialised).
func newStorePool(st idkeeper.StoreStatus) *storePool {
	if st.Pool.Nodes <= 0 {
		return nil
	}
	p := st.Pool
	p.Layout = p.LayoutOrDefault()
	return &storePool{p}
}

// Last is the pool's last node ID, included: First + Nodes − 1.
func (p *storePool) Last() idkeeper.NodeID { return p.End() - 1 }

// Range is the node range for people: "100–163 (64 node IDs)", "7 (1 node ID)".
func (p *storePool) Range() string {
	if p.Nodes == 1 {
		return strconv.FormatInt(int64(p.First), 10) + " (1 node ID)"
	}
	return strconv.FormatInt(int64(p.First), 10) + "–" + strconv.FormatInt(int64(p.Last()), 10) +
		" (" + grouped(int64(p.Nodes)) + " node IDs)"
}

// Widths are the layout's widths in bits, timestamp/node/sequence: "41/12/10".
func (p *storePool) Widths() string { return p.Layout.Widths() }

// Epoch is the layout's epoch as a <time> element, in the canonical text of
// --epoch: "2026-01-01T00:00:00.000Z".
func (p *storePool) Epoch() template.HTML { return timeElement(p.Layout.Epoch, wire.TimeFormat) }

// Ceiling is what one node ID can mint at most: "1,024,000 IDs/s".
func (p *storePool) Ceiling() string { return grouped(p.Layout.IDsPerSecond()) + " IDs/s" }

// PerMs is what one node ID can mint in a millisecond: "1,024" (2^SequenceBits).
func (p *storePool) PerMs() string { return grouped(p.Layout.MaxSequence() + 1) }

// Holds is the node IDs the layout's node bits allow: "0–4095".
func (p *storePool) Holds() string { return "0–" + strconv.FormatInt(p.Layout.MaxNode(), 10) }

// RangeEnd is the end of the layout's time range as a <time> element, to the day:
// the first instant it cannot represent (Layout.End).
func (p *storePool) RangeEnd() template.HTML { return timeElement(p.Layout.End(), "2006-01-02") }

// wire is the pool as GET /admin/api/store shows it.
func (p *storePool) wire() *wire.StorePool {
	l := p.Layout
	layout := wire.Layout{Epoch: wire.FormatTime(l.Epoch), TimestampBits: l.TimestampBits, NodeBits: l.NodeBits,
		SequenceBits: l.SequenceBits}
	return &wire.StorePool{First: int64(p.First), Last: int64(p.Last()), Nodes: p.Nodes,
		Layout: wire.LayoutLimits{Layout: layout, IDsPerSecond: l.IDsPerSecond(), End: wire.FormatTime(l.End())}}
}

// grouped writes n ≥ 0 in decimal with a comma between groups of three digits:
// "1,024,000".
func grouped(n int64) string {
	s := strconv.FormatInt(n, 10)
	out := make([]byte, 0, len(s)+len(s)/3)
	for i := range len(s) {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	return string(out)
}

// wire is the report as GET /admin/api/store shows it.
func (rep *resetReport) wire() *wire.StoreReset {
	out := &wire.StoreReset{At: wire.FormatTime(rep.At), Generation: rep.Generation,
		QuarantineEnd: wire.FormatTime(rep.QuarantineEnd), Restored: []wire.AuditEntry{}, RestoredMore: rep.RestoredMore,
		RestoredComplete: rep.RestoredComplete && rep.RestoredErr == nil}
	if rep.Why != "" {
		why := rep.Why
		out.Why = &why
	}
	if rep.QuarantinedErr == nil {
		out.Quarantined = make([]wire.QuarantineGroup, len(rep.Quarantined))
		for i, g := range rep.Quarantined {
			out.Quarantined[i] = wire.QuarantineGroup{Nodes: g.Ranges(), Count: len(g.Nodes), Until: wire.FormatTime(g.Until)}
		}
	}
	for _, e := range rep.Restored {
		out.Restored = append(out.Restored, auditJSON(e))
	}
	return out
}

// auditJSON is e as the admin API shows it.
func auditJSON(e audit.Entry) wire.AuditEntry {
	return wire.AuditEntry{Seq: e.Seq, At: wire.FormatTime(e.At), Actor: e.Actor, Action: e.Action, Target: e.Target,
		RemoteIP: e.RemoteIP, Detail: e.Detail, Hash: e.Hash}
}

// storeHealth tells what the registry knows of its store: phase, generation,
// the last reset it recovered from (resetReport), the fencing counter, the pool
// (its size, node range and layout: storePool), the store's clock and whether it
// agrees with the server's, the durability the server was started with, the job
// locks held (every replica's), the last run of each job on this replica, and the
// Discord alerts' state.
func (h *Handler) storeHealth(_ http.ResponseWriter, r *http.Request, _ *principal) (any, error) {
	ctx := r.Context()
	s := h.reg.StoreHealth(ctx)
	out := wire.StoreHealth{Phase: string(s.Phase), Reachable: s.StatusErr == nil, ClockOK: s.ClockOK,
		ClockOffsetMs: s.ClockOffset.Milliseconds(), Durability: h.cfg.durability(), ClockCheck: h.cfg.ClockCheck, JobRuns: []wire.JobRun{}}
	if g := s.Adopted; !g.IsZero() {
		out.Generation = &wire.Generation{Number: g.Number, ID: g.ID, Origin: string(g.Origin), At: wire.FormatTime(g.At)}
		if g.Origin == idkeeper.OriginRecovered {
			out.LastReset = optTime(g.At)
		}
	}
	if s.StatusErr == nil {
		out.FencingCounter, out.Nodes, out.StoreTime = s.Status.Fence, s.Status.Pool.Nodes, optTime(s.Status.Now)
		if p := newStorePool(s.Status); p != nil {
			out.Pool = p.wire()
		}
	} else {
		h.log.Warn("the store did not answer the health read", "err", s.StatusErr)
	}
	if rep := h.resetReport(ctx, s); rep != nil {
		out.Reset = rep.wire()
	}
	if lr := h.restores.last.Load(); lr != nil {
		out.LastRestore = lr.wire()
	}
	if s.LocksErr == nil {
		out.JobLocks = make([]wire.JobLock, len(s.Locks))
		for i, l := range s.Locks {
			out.JobLocks[i] = wire.JobLock{Name: l.Name, Owner: l.Owner, LockedAt: wire.FormatTime(l.LockedAt), Until: wire.FormatTime(l.Until)}
		}
	} else {
		h.log.Warn("the store did not answer the read of the job locks", "err", s.LocksErr)
	}
	if av, err := h.alerts(ctx); err != nil {
		h.log.Warn("the store did not answer the read of the alerts' state", "err", err)
	} else {
		out.Alerts = av.wire()
	}
	for _, run := range s.Runs {
		out.JobRuns = append(out.JobRuns, wire.JobRun{Job: run.Job, Started: wire.FormatTime(run.Started),
			Finished: wire.FormatTime(run.Finished), Outcome: string(run.Outcome), Detail: run.Detail})
	}
	return out, nil
}
